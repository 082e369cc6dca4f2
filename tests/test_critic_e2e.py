"""Issue 5 end to end: `loopd once` and `loopd run` judged by the scripted critic endpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.helpers import (
    ROOT,
    daemon_log,
    events,
    file_text,
    git,
    loopd,
    make_home,
    make_repo,
    start_daemon,
    stop_daemon,
    transcript_text,
    wait_for,
)
from tests.model_server import ScriptedModelServer

BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5\nprint('CHECK-MARK-5521 add ok')\n",
}
# Fake secrets with the shapes of real ones; neither may reach the model or state/.
AWS_KEY = "AKIA" + "Z7Q3XK2M4N5P6R7T"
GITHUB_TOKEN = "ghp_" + "Qw7rT2yU9iO4pA6sD1fG3hJ5kL8zX0cV2bN4"
CRITIC_KEY = "sk-critic-" + "9f8e7d6c5b4a39281706f5e4d3c2b1a0"


def fixer(marker: Path | None = None) -> str:
    """A command agent that fixes calc.py and prints evidence, a summary and two secrets."""
    lines = ["import os, pathlib"]
    if marker is not None:
        lines.append(f"with open({str(marker)!r}, 'a') as m: m.write('ran\\n')")
    lines += [
        "print('AGENT-MARK-7731 reading calc.py')",
        f"print('export AWS_ACCESS_KEY_ID={AWS_KEY}')",
        f"print('github token: {GITHUB_TOKEN}')",
        "print('critic key visible:', os.environ.get('CRITIC_KEY'))",
        "p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))",
        "print('Fixed add() in calc.py; python3 check.py passes.')",
    ]
    return "\n".join(lines) + "\n"


def config(server: ScriptedModelServer, script: str, **verifier: str) -> str:
    settings = {"timeout": "2s", "pending_limit": "60s", **verifier}
    lines = ["[verifier]", f'base_url = "{server.base_url}"']
    lines.append(f'model = "{settings.pop("model", "critic-model")}"')
    lines += [f'{key} = "{value}"' for key, value in settings.items()]
    argv = [sys.executable, "-c", script]
    lines += ["", "[agents.fixer]", 'adapter = "command"', 'model = "agent-model"']
    lines.append(f"command = {json.dumps(argv)}")
    return "\n".join(lines) + "\n"


def loop_file(repo: Path, **extra: object) -> str:
    settings: dict[str, object] = {
        "repo": str(repo),
        "task": "Make check.py pass.",
        "agent": "fixer",
        "done_when": ["python3 check.py"],
        "attempt_timeout": "60s",
        "stall_after": "30s",
        "max_nudges": 0,
        **extra,
    }
    return "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())


def verdict(
    score: int, text: str, feedback: str = "", unsupported: list[str] | None = None
) -> dict[str, object]:
    """A scripted `critic_verdict` reply."""
    return {
        "json": {
            "score": score,
            "verdict": text,
            "unsupported_claims": unsupported or [],
            "feedback": feedback,
        }
    }


@pytest.fixture
def server(model_server: ScriptedModelServer) -> ScriptedModelServer:
    # Calls a test does not script (the post-mortem of a failed attempt) fail fast.
    model_server.default = {"status": 404, "message": "not scripted in this test"}
    return model_server


VERIFIER_KEYS = ("timeout", "pending_limit", "model", "api_key_env")


def make_case(
    tmp_path: Path, server: ScriptedModelServer, script: str | None = None, **keys: object
) -> tuple[Path, Path]:
    """A repository and a home with loop `calc`; `keys` go to [verifier] or to the loop file."""
    repo = make_repo(tmp_path / "repo", BUGGY)
    verifier = {k: str(v) for k, v in keys.items() if k in VERIFIER_KEYS}
    loop = {k: v for k, v in keys.items() if k not in verifier}
    home = make_home(
        tmp_path / "home",
        config(server, script or fixer(), **verifier),
        {"calc": loop_file(repo, **loop)},
    )
    return repo, home


def read_run(home: Path, run_id: str) -> dict:
    return tomllib.loads((home / "state" / "runs" / run_id / "run.toml").read_text())


def read_verdict(home: Path, run_id: str, n: int) -> dict:
    path = home / "state" / "runs" / run_id / f"attempt-{n}" / "verdict.toml"
    return tomllib.loads(path.read_text())


def run_events(home: Path, run_id: str, type_: str) -> list[dict]:
    return [e for e in events(home) if e.get("run") == run_id and e["type"] == type_]


def once_in_background(home: Path, tmp_path: Path) -> subprocess.Popen[str]:
    """`loopd once calc` as a process the test watches; its stderr goes to once.err."""
    env = dict(os.environ)
    env.pop("LOOPD_HOME", None)
    with (tmp_path / "once.err").open("w") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "daemon.cli.main", "--home", str(home), "once", "calc"],
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=ROOT,
        )


def phase_of_only_run(home: Path) -> str | None:
    """The phase in run.toml of the home's one run (None before it exists)."""
    folder = home / "state" / "runs"
    found = sorted(folder.glob("*/run.toml")) if folder.exists() else []
    if len(found) != 1:
        return None
    return tomllib.loads(found[0].read_text()).get("phase")


def state_text(home: Path) -> str:
    """Every file under state/, as one string to search for what must not be there."""
    out = []
    for path in sorted((home / "state").rglob("*")):
        if path.is_file():
            out.append(file_text(path))
    return "\n".join(out)


# -- pass and fail by score ----------------------------------------------------------------


def test_checks_pass_and_score_8_succeeds(tmp_path: Path, server: ScriptedModelServer) -> None:
    server.add(verdict(8, "The fix is shown by the diff and the checks."), name="critic_verdict")
    _, home = make_case(tmp_path, server)
    proc = loopd(home, "once", "calc")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    run = read_run(home, run_id)
    assert run["outcome"] == "succeeded"
    (attempt,) = run["attempts"]
    assert attempt["checks_passed"] is True and attempt["score"] == 8
    assert attempt["verdict"] == "The fix is shown by the diff and the checks."
    saved = read_verdict(home, run_id, 1)
    assert saved["score"] == 8 and saved["passed"] is True and saved["judged"] is True
    assert saved["threshold"] == 7
    (event,) = run_events(home, run_id, "verdict")
    assert event["score"] == 8 and event["passed"] is True
    assert len(server.chat_requests("critic_verdict")) == 1


def test_score_3_fails_and_its_feedback_is_in_the_next_prompt_and_in_show(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    feedback = "Show the output of python3 check.py in the transcript before claiming it passes."
    server.add(
        verdict(3, "The summary claims a test run it never made.", feedback, ["tests pass"]),
        verdict(9, "Backed by the checks this time.", "nothing left"),
        name="critic_verdict",
    )
    _, home = make_case(tmp_path, server)
    proc = loopd(home, "once", "calc")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    run = read_run(home, run_id)
    assert run["outcome"] == "succeeded"
    first, second = run["attempts"]
    assert first["checks_passed"] is True and first["score"] == 3
    assert first["feedback"] == feedback
    assert second["score"] == 9
    assert read_verdict(home, run_id, 1)["passed"] is False
    assert read_verdict(home, run_id, 1)["unsupported_claims"] == ["tests pass"]
    folder = home / "state" / "runs" / run_id
    assert "# Reviewer feedback" not in (folder / "attempt-1" / "prompt.md").read_text()
    prompt = (folder / "attempt-2" / "prompt.md").read_text()
    assert "# Reviewer feedback" in prompt
    section = prompt.split("# Reviewer feedback", 1)[1]
    assert feedback in section
    assert prompt.index("# Task") < prompt.index("# Reviewer feedback")

    shown = loopd(home, "show", run_id, env={"COLUMNS": "400"})
    assert shown.returncode == 0, shown.stderr
    assert "The summary claims a test run it never made." in shown.stdout
    assert "Backed by the checks this time." in shown.stdout
    assert feedback in shown.stdout
    scores = [line for line in shown.stdout.splitlines() if "never made" in line]
    assert any(" 3 " in line for line in scores), shown.stdout
    as_json = json.loads(loopd(home, "show", run_id, "--json").stdout)
    got = [(a["n"], a["score"], a["verdict"], a["feedback"]) for a in as_json["attempts"]]
    assert got == [
        (1, 3, "The summary claims a test run it never made.", feedback),
        (2, 9, "Backed by the checks this time.", "nothing left"),
    ]


def test_a_high_score_does_not_pass_failing_checks(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    server.add(verdict(10, "Looks perfect."), name="critic_verdict")
    _, home = make_case(tmp_path, server, "print('All done, tests pass.')", max_attempts=1)
    proc = loopd(home, "once", "calc")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    run = read_run(home, run_id)
    assert run["outcome"] == "escalated"
    (attempt,) = run["attempts"]
    assert attempt["checks_passed"] is False and attempt["score"] == 10
    assert read_verdict(home, run_id, 1)["passed"] is False
    (request,) = server.chat_requests("critic_verdict")
    assert "loopd's own run of the checks: FAILED" in request["messages"][-1]["content"]


# -- invalid replies -----------------------------------------------------------------------


def test_an_invalid_reply_is_repaired_once(tmp_path: Path, server: ScriptedModelServer) -> None:
    server.add("Looks fine to me, 8/10!", name="critic_verdict")
    server.add(verdict(8, "Repaired: the fix is backed."), name="critic_verdict")
    _, home = make_case(tmp_path, server)
    proc = loopd(home, "once", "calc")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    assert read_run(home, run_id)["attempts"][0]["score"] == 8
    first, repair = server.chat_requests("critic_verdict")
    assert repair["messages"][:2] == first["messages"]
    assert repair["messages"][2] == {"role": "assistant", "content": "Looks fine to me, 8/10!"}
    assert "not a valid `critic_verdict` object" in repair["messages"][3]["content"]
    assert run_events(home, run_id, "verifier_unavailable") == []


def test_a_second_invalid_reply_leaves_the_run_waiting_in_judging(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    server.default = "still not JSON"
    server.add("not JSON", '{"score": 11}', name="critic_verdict")
    _, home = make_case(tmp_path, server)
    proc = once_in_background(home, tmp_path)
    try:
        run_id = proc.stdout.readline().strip()
        wait_for(
            lambda: run_events(home, run_id, "verifier_unavailable"),
            timeout=30,
            what="verifier_unavailable",
        )
        run = read_run(home, run_id)
        assert run["phase"] == "judging" and "outcome" not in run
        assert "score" not in run["attempts"][0]
        assert not (home / "state" / "runs" / run_id / "attempt-1" / "verdict.toml").exists()
        (unavailable, *_) = run_events(home, run_id, "verifier_unavailable")
        assert "still invalid after one repair" in unavailable["error"]
        # The endpoint answers validly again: the run goes on and finishes.
        server.add(verdict(8, "Valid at last."), name="critic_verdict")
        out, _ = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out + (tmp_path / "once.err").read_text()
    run = read_run(home, run_id)
    assert run["outcome"] == "succeeded" and run["attempts"][0]["score"] == 8
    assert len(run["attempts"]) == 1


def test_invalid_replies_past_pending_limit_escalate_as_verifier_unavailable(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    server.default = "I refuse to answer in JSON."
    _, home = make_case(tmp_path, server, pending_limit="1s")
    proc = loopd(home, "once", "calc")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    run = read_run(home, run_id)
    assert run["outcome"] == "escalated"
    assert "verifier unavailable" in run["reason"]
    (attempt,) = run["attempts"]
    assert "score" not in attempt
    escalation = (home / "state" / "escalations" / f"{run_id}.md").read_text()
    assert "verifier unavailable" in escalation
    assert run_events(home, run_id, "verdict") == []
    assert run_events(home, run_id, "verifier_unavailable")
    # Each try of the critic is a request and its one repair.
    assert len(server.chat_requests("critic_verdict")) % 2 == 0


# -- endpoint down -------------------------------------------------------------------------


def test_server_down_then_up_the_run_waits_in_judging_and_finishes(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    server.add(verdict(8, "Judged after the endpoint came back."), name="critic_verdict")
    server.down = "refuse"
    _, home = make_case(tmp_path, server)
    proc = once_in_background(home, tmp_path)
    try:
        run_id = proc.stdout.readline().strip()
        wait_for(
            lambda: run_events(home, run_id, "verifier_unavailable"),
            timeout=30,
            what="the run to wait for the verifier",
        )
        assert phase_of_only_run(home) == "judging"
        assert proc.poll() is None
        server.down = None
        out, _ = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out + (tmp_path / "once.err").read_text()
    run = read_run(home, run_id)
    assert run["outcome"] == "succeeded"
    assert run["attempts"][0]["verdict"] == "Judged after the endpoint came back."
    waited = run_events(home, run_id, "verifier_unavailable")
    assert waited and all("unreachable" in e["error"] for e in waited)
    types = [e["type"] for e in events(home) if e.get("run") == run_id]
    assert types.index("verifier_unavailable") < types.index("verdict")


def test_a_run_waiting_in_judging_can_be_cancelled(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    server.down = "refuse"
    _, home = make_case(tmp_path, server)
    proc = once_in_background(home, tmp_path)
    try:
        run_id = proc.stdout.readline().strip()
        wait_for(
            lambda: run_events(home, run_id, "verifier_unavailable"),
            timeout=30,
            what="the run to wait for the verifier",
        )
        cancel = loopd(home, "cancel", run_id)
        assert cancel.returncode == 0, cancel.stdout + cancel.stderr
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, out
    run = read_run(home, run_id)
    assert run["outcome"] == "cancelled"
    assert "score" not in run["attempts"][0]


# -- what the critic is sent ---------------------------------------------------------------


def test_request_log_has_the_schema_name_the_evidence_and_no_secret(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    server.add(verdict(8, "Backed."), name="critic_verdict")
    # The agent leaves both secrets in a file of the repository; a check prints that file.
    script = fixer() + (
        f"pathlib.Path('settings.env').write_text('AWS={AWS_KEY}\\nGH={GITHUB_TOKEN}\\n')\n"
    )
    _, home = make_case(
        tmp_path,
        server,
        script,
        done_when=["python3 check.py", "cat settings.env"],
        api_key_env="CRITIC_KEY",
    )
    proc = loopd(home, "once", "calc", env={"CRITIC_KEY": CRITIC_KEY})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    (request,) = server.chat_requests("critic_verdict")
    assert request["response_format"]["type"] == "json_schema"
    assert request["response_format"]["json_schema"]["name"] == "critic_verdict"
    user = request["messages"][-1]["content"]
    assert "Make check.py pass." in user  # the task
    assert "AGENT-MARK-7731" in user  # the agent's output
    assert "CHECK-MARK-5521" in user  # the checks' output
    assert "a + b" in user  # the diff
    assert "Fixed add() in calc.py" in user  # the agent's summary
    log = server.log_text()
    for secret in (AWS_KEY, GITHUB_TOKEN, CRITIC_KEY):
        assert secret not in log
        assert secret not in state_text(home)
    assert "REDACTED" in user
    # The verifier's key is not in the agent's environment either.
    transcript = transcript_text(home / "state" / "runs" / run_id / "attempt-1")
    assert "critic key visible: None" in transcript
    folder = home / "state" / "runs" / run_id / "attempt-1"
    diff = (folder / "diff.patch").read_text()
    assert "settings.env" in diff and "REDACTED" in diff
    assert "REDACTED" in (folder / "checks.log").read_text()


def test_a_secret_in_a_check_command_is_redacted_in_state(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    server.add(verdict(8, "Backed."), name="critic_verdict")
    _, home = make_case(
        tmp_path,
        server,
        done_when=["python3 check.py", f"test -n '{GITHUB_TOKEN}'"],
    )
    proc = loopd(home, "once", "calc")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert GITHUB_TOKEN not in server.log_text()
    leaks = [
        str(path.relative_to(home))
        for path in (home / "state").rglob("*")
        if path.is_file() and GITHUB_TOKEN in file_text(path)
    ]
    assert leaks == []


# -- critic off and the same-model warning -------------------------------------------------


def test_critic_off_skips_the_call_and_records_not_judged(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    _, home = make_case(tmp_path, server, critic="off")
    proc = loopd(home, "once", "calc")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    assert server.chat_requests() == []
    run = read_run(home, run_id)
    assert run["outcome"] == "succeeded"
    assert "not judged by a model" in run["reason"]
    (attempt,) = run["attempts"]
    assert "score" not in attempt and attempt["judged"] is False
    assert "not judged by a model" in attempt["verdict"]
    saved = read_verdict(home, run_id, 1)
    assert saved["judged"] is False and "score" not in saved
    (event,) = run_events(home, run_id, "verdict")
    assert event["judged"] is False and event["score"] is None


def test_same_model_for_critic_and_agent_warns_in_status_and_events(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    _, home = make_case(tmp_path, server, model="agent-model", enabled=False)
    status = json.loads(loopd(home, "status", "--json").stdout)
    assert any("agent-model" in w for w in status["daemon"]["warnings"]), status
    daemon = start_daemon(home)
    try:
        warnings = wait_for(
            lambda: [e for e in events(home) if e["type"] == "config_warning"],
            timeout=10,
            what="config_warning",
        )
        running = json.loads(loopd(home, "status", "--json").stdout)
    finally:
        stop_daemon(daemon)
    assert any("agent-model" in e["message"] for e in warnings)
    assert running["daemon"]["running"] is True
    # Said once, not once from the daemon's status file and again from the loop files.
    shown = [w for w in running["daemon"]["warnings"] if "is the agent's model" in w]
    assert len(shown) == 1, running["daemon"]["warnings"]
    assert "agent-model" in loopd(home, "status", env={"COLUMNS": "400"}).stdout


def test_same_model_warning_from_loopd_once(tmp_path: Path, server: ScriptedModelServer) -> None:
    server.add(verdict(8, "Backed."), name="critic_verdict")
    _, home = make_case(tmp_path, server, model="agent-model")
    proc = loopd(home, "once", "calc")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "agent-model" in proc.stderr, "loopd once does not warn on stderr"
    warnings = [e for e in events(home) if e["type"] == "config_warning"]
    assert any("agent-model" in e["message"] for e in warnings), "no config_warning event"


# -- restart -------------------------------------------------------------------------------


def test_restart_resumes_a_pending_judgement_without_rerunning_the_agent(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    marker = Path("agent-ran")  # in the run's tree: the sandbox lets it write nowhere else
    server.add(verdict(8, "Judged by the restarted daemon."), name="critic_verdict")
    server.down = "503"
    repo, home = make_case(tmp_path, server, fixer(marker))
    daemon = start_daemon(home)
    try:
        assert loopd(home, "trigger", "calc").returncode == 0
        wait_for(
            lambda: [e for e in events(home) if e["type"] == "verifier_unavailable"],
            timeout=30,
            what="the run to wait for the verifier",
        )
        assert phase_of_only_run(home) == "judging"
        status = json.loads(loopd(home, "status", "--json").stdout)
        assert status["loops"]["calc"]["phase"] == "judging"
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.wait(timeout=10)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    (run_dir,) = (home / "state" / "runs").iterdir()
    run_id = run_dir.name
    assert read_run(home, run_id)["phase"] == "judging"
    server.down = None
    daemon = start_daemon(home)
    try:
        wait_for(
            lambda: read_run(home, run_id).get("outcome"),
            timeout=40,
            what="the resumed run to end",
        )
    finally:
        stop_daemon(daemon)
    run = read_run(home, run_id)
    assert run["outcome"] == "succeeded", daemon_log(home)
    assert len(run["attempts"]) == 1
    assert run["attempts"][0]["verdict"] == "Judged by the restarted daemon."
    # The agent ran once, before the restart.
    assert git(repo, "show", f"{run['branch']}:agent-ran") == "ran"
    assert [e["type"] for e in events(home) if e["type"] == "run_recovered"] == ["run_recovered"]
    assert len(run_events(home, run_id, "attempt_started")) == 1
    assert not any(p.name.startswith("attempt-2") for p in run_dir.iterdir())
    assert (repo / "calc.py").read_text() == BUGGY["calc.py"]
    assert "a + b" in git(repo, "show", f"{run['branch']}:calc.py")
    assert not Path(run["worktree"]).exists()
