"""The run lifecycle's behaviour, the same on both engines: outcomes, retries, coalescing,
cancel, escalation, learning, the critic's feedback, pause.

Each test runs against `loopd run` with `[engine] kind = "local"` and with `"temporal"` (a real
dev server; the home's own worker runs the attempts), through the same commands. The home's
state/ is what a person reads in both cases.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import make_home, make_repo, processes_with, talk, unique_token, wait_for
from tests.machines import BUGGY, TASK, Machine, command_agent, engine_toml, loop_toml

FIX = (
    "import pathlib; p = pathlib.Path('calc.py'); "
    "p.write_text(p.read_text().replace('a - b', 'a + b'))"
)
IDLE = "print('looked around, changed nothing')"
LOOP = {
    "task": TASK,
    "agent": "a",
    "done_when": ["python3 check.py"],
    "attempt_timeout": "120s",
    "stall_after": "60s",
    "max_nudges": 0,
    "max_attempts": 1,
    "critic": "off",
}


@pytest.fixture(params=["local", "temporal"])
def engine(request: pytest.FixtureRequest) -> str:
    """The engine's part of loopd.toml ("" for the local engine)."""
    if request.param == "local":
        return ""
    server, namespace = request.getfixturevalue("temporal")
    return engine_toml(server.address, namespace)


def make_machine(tmp_path: Path, engine: str, agent: str, config: str = "", **loop: Any) -> Machine:
    """One machine: a home with loop `calc` on its own repository, its own HOME."""
    root = tmp_path / "machine"
    repo = make_repo(root / "src" / "app", BUGGY)
    text = agent + config + f'\n[limits]\nworktrees = "{root / "worktrees"}"\n' + engine
    home = make_home(root / "loopd-home", text, {"calc": loop_toml(repo, **{**LOOP, **loop})})
    return Machine("machine", root, home, repo)


def script_agent(script: str) -> str:
    return command_agent("a", script)


def finished(machine: Machine, count: int) -> list[dict[str, Any]]:
    found = machine.runs()
    return found if len(found) >= count and all(r.get("outcome") for r in found) else []


@pytest.fixture
def machines() -> Any:
    started: list[Machine] = []
    yield started
    for machine in started:
        for proc in machine.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_fixing_agent_succeeds_and_an_idle_one_is_escalated_with_its_cause(
    tmp_path: Path, engine: str, machines: list
) -> None:
    machine = make_machine(tmp_path, engine, script_agent(FIX))
    machines.append(machine)
    machine.start("run")
    proc = machine.loopd("trigger", "calc", "--reason", "from a test", "--wait")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    assert "succeeded: checks pass on attempt 1" in proc.stdout
    shown = json.loads(machine.loopd("show", run_id, "--json").stdout)
    assert shown["outcome"] == "succeeded" and shown["trigger"]["reason"] == "from a test"
    (run,) = machine.runs()
    assert run["id"] == run_id and run["outcome"] == "succeeded" and run["cause"] == "passed"
    listed = json.loads(machine.loopd("runs", "--json").stdout)
    assert [(r["id"], r["outcome"]) for r in listed] == [(run_id, "succeeded")]
    status = json.loads(machine.loopd("status", "--json").stdout)
    assert status["loops"]["calc"]["last_outcome"] == "succeeded"
    # What a person reads in a terminal of 80 columns names the RUN_ID whole.
    for command in ("runs", "status"):
        out = machine.loopd(command).stdout
        assert run_id in out, command
        if command == "runs":  # the last column is not cropped away at 80 columns
            assert "reason" in out and "checks pass" in out, out

    (machine.home / "loopd.toml").write_text(
        (machine.home / "loopd.toml").read_text().replace(json.dumps(FIX), json.dumps(IDLE))
    )
    assert machine.stop() == 0
    loop = machine.home / "loops" / "calc.toml"
    loop.write_text(loop.read_text().replace("max_attempts = 1", "max_attempts = 2"))
    machine.start("run")
    proc = machine.loopd("trigger", "calc", "--wait")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    failed = proc.stdout.splitlines()[0]
    record = next(r for r in machine.runs() if r["id"] == failed)
    assert record["outcome"] == "escalated" and record["cause"] == "checks-failed"
    assert record["reason"] == "attempts used up; checks still fail after 2 attempts"
    assert [a["checks_passed"] for a in record["attempts"]] == [False, False]
    # The second prompt carries what failed; the escalation is the home's, for a person.
    prompt = machine.home / "state" / "runs" / failed / "attempt-2" / "prompt.md"
    assert "# What failed last time" in prompt.read_text()
    assert "add(2, 3) gave -1" in prompt.read_text()
    assert (machine.home / "state" / "escalations" / f"{failed}.md").is_file()
    listed = json.loads(machine.loopd("escalations", "list", "--json").stdout)
    assert [(e["run"], e["cause"]) for e in listed] == [(failed, "checks-failed")]
    shown = machine.loopd("escalations", "show", failed)
    assert shown.returncode == 0 and "checks" in shown.stdout
    resolved = machine.loopd("escalations", "resolve", failed, "--note", "looked at it", "--retry")
    assert resolved.returncode == 0, resolved.stderr
    # The retry's RUN_ID, as with `trigger`: the run it names exists.
    assert resolved.stdout.splitlines()[0] == f"resolved {failed}"
    retry_id = resolved.stdout.splitlines()[1]
    (retry,) = wait_for(lambda: [r for r in machine.runs() if r["id"] == retry_id])
    assert retry["trigger"]["note"] == "looked at it"
    # The resolved escalation is gone (the retry, as idle, may already have one of its own).
    listed = json.loads(machine.loopd("escalations", "list", "--json").stdout)
    assert [e["run"] for e in listed if e["run"] != retry_id] == []
    assert machine.stop() == 0


def gated_machine(tmp_path: Path, engine: str, machines: list) -> tuple[Machine, Path]:
    """A machine whose first run's agent waits at a gate file."""
    folder, writable = talk(tmp_path)
    gate, started = folder / "gate", folder / "started"
    script = (
        "import pathlib, time\n"
        f"pathlib.Path({str(started)!r}).write_text('x')\n"
        f"while not pathlib.Path({str(gate)!r}).exists():\n"
        "    time.sleep(0.05)\n"
        "p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
    )
    machine = make_machine(tmp_path, engine, script_agent(script), writable)
    machines.append(machine)
    machine.start("run")
    assert machine.loopd("trigger", "calc", "--reason", "first").returncode == 0
    wait_for(started.exists, timeout=60, what="the first run's agent")
    return machine, gate


def test_triggers_during_a_run_coalesce_into_one_pending_run(
    tmp_path: Path, engine: str, machines: list
) -> None:
    machine, gate = gated_machine(tmp_path, engine, machines)
    for i in range(6):
        assert machine.loopd("trigger", "calc", "--reason", f"burst {i}").returncode == 0
    wait_for(lambda: len(machine.events("trigger")) >= 7, timeout=60, what="every trigger taken")
    gate.write_text("go")
    first, merged = wait_for(lambda: finished(machine, 2), timeout=90, what="two runs")
    assert first["trigger"]["reason"] == "first"
    reasons = [merged["trigger"]["reason"]] + [m["reason"] for m in merged["trigger"]["merged"]]
    assert reasons == [f"burst {i}" for i in range(6)]
    assert len(machine.events("trigger_merged")) == 5
    assert len(machine.runs()) == 2 and merged["outcome"] == "succeeded"
    assert machine.stop() == 0


def test_a_queued_run_can_be_cancelled_before_it_starts_and_a_running_one_while_it_runs(
    tmp_path: Path, engine: str, machines: list
) -> None:
    machine, gate = gated_machine(tmp_path, engine, machines)
    second = machine.loopd("trigger", "calc", "--reason", "second")
    assert second.returncode == 0, second.stdout + second.stderr
    # The trigger's event names the pending run that holds it, on both engines, and
    # `trigger` prints that RUN_ID on its first line.
    (queued,) = wait_for(
        lambda: [e for e in machine.events("trigger") if e.get("reason") == "second"],
        what="the queued run",
    )
    assert second.stdout.splitlines()[0] == queued["run"]
    queued = [{"id": queued["run"]}]
    proc = machine.loopd("cancel", queued[0]["id"])
    assert proc.returncode == 0 and "cancel requested for queued run" in proc.stdout
    (running,) = wait_for(lambda: [r for r in machine.runs() if r.get("phase") == "running"])
    proc = machine.loopd("cancel", running["id"])
    assert proc.returncode == 0, proc.stderr
    runs = wait_for(lambda: finished(machine, 2), timeout=60, what="both runs cancelled")
    assert sorted((r["id"], r["outcome"]) for r in runs) == sorted(
        [(queued[0]["id"], "cancelled"), (running["id"], "cancelled")]
    )
    never = next(r for r in runs if r["id"] == queued[0]["id"])
    assert never["attempts"] == [] and never["reason"] == "cancelled while queued"
    assert machine.stop() == 0


def test_kill_9_mid_attempt_is_interrupted_then_retried_once_and_leftovers_killed(
    tmp_path: Path, engine: str, machines: list
) -> None:
    folder, writable = talk(tmp_path)
    marker = folder / "agent-started"
    # In the command lines of the agent and its grandchild: the sandbox gives them pids of
    # their own, so the test finds them by it.
    token = unique_token("kill9", tmp_path)
    script = (
        f"# {token}\n"
        "import os, pathlib, subprocess, sys, time\n"
        f"marker = pathlib.Path({str(marker)!r})\n"
        "if not marker.exists():\n"
        "    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)',"
        f" {token!r}], start_new_session=True)\n"
        "    marker.write_text('yes')\n"
        "    time.sleep(600)\n" + FIX.replace("; ", "\n") + "\n"
    )
    machine = make_machine(tmp_path, engine, script_agent(script), writable)
    machines.append(machine)
    machine.start("run")
    assert machine.loopd("trigger", "calc").returncode == 0
    wait_for(marker.exists, timeout=60, what="the first run's agent")
    assert len(processes_with(token)) >= 2
    machine.kill9()
    machine.start("run")
    try:
        wait_for(
            lambda: not processes_with(token),
            timeout=30,
            what="the killed loopd's agent processes to be killed",
        )
        first, retry = wait_for(lambda: finished(machine, 2), timeout=90, what="the retry")[:2]
        assert first["outcome"] == "interrupted" and first["cause"] == "interrupted"
        assert retry["trigger"]["kind"] == "retry" and retry["trigger"]["retry_of"] == first["id"]
        assert retry["outcome"] == "succeeded"
        assert first["attempts"][0]["interrupted"] is True
        assert sum(r["trigger"]["kind"] == "retry" for r in machine.runs()) == 1
        assert machine.stop() == 0
    finally:
        for pid in processes_with(token):
            os.kill(pid, signal.SIGKILL)


def test_a_failure_becomes_a_rule_that_the_next_attempts_prompt_carries(
    tmp_path: Path, engine: str, machines: list, model_server: Any
) -> None:
    from tests.test_learning_e2e import AGENT, AGREES, LEARNED, RULE_MARK, default_reply

    model_server.script(default_reply)
    model_server.add({"json": LEARNED}, name="postmortem_rule")
    model_server.add({"json": AGREES}, name="rule_verification")
    script = tmp_path / "agent.py"
    script.write_text(AGENT.replace("RULE_MARK", repr(RULE_MARK)))
    folder, writable = talk(tmp_path)
    argv = [sys.executable, str(script), str(folder / "started.txt")]
    agent = f'[agents.a]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'
    verifier = (
        f'[verifier]\nbase_url = "{model_server.base_url}"\nmodel = "critic-model"\n'
        'timeout = "20s"\njudge_timeout = "20s"\npending_limit = "30s"\n'
    )
    machine = make_machine(
        tmp_path, engine, agent, verifier + writable, critic="on", max_attempts=2
    )
    (machine.repo / "legacy").mkdir()
    (machine.repo / "legacy" / "calc.py").write_text(BUGGY["calc.py"])
    from tests.helpers import git

    git(machine.repo, "add", "-A")
    git(machine.repo, "commit", "-q", "-m", "legacy")
    machines.append(machine)
    machine.start("run")
    proc = machine.loopd("trigger", "calc", "--wait")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    (run,) = machine.runs()
    assert [a["checks_passed"] for a in run["attempts"]] == [False, True]
    (rule,) = (machine.home / "rules" / "trial").glob("*.md")
    assert rule.stem in run["rules_fired"]
    folder = machine.home / "state" / "runs" / run_id
    assert "# Rules from earlier runs" not in (folder / "attempt-1" / "prompt.md").read_text()
    second = (folder / "attempt-2" / "prompt.md").read_text()
    assert "# Rules from earlier runs" in second and LEARNED["rule"] in second
    fired = [e for e in machine.events("rule_fired") if e["run"] == run_id]
    assert [(e["rule"], e["why"]) for e in fired] == [(rule.stem, "learned")]
    assert machine.stop() == 0


def test_the_critics_feedback_goes_into_the_next_attempts_prompt(
    tmp_path: Path, engine: str, machines: list, model_server: Any
) -> None:
    from tests.test_learning_e2e import default_reply

    feedback = "Show the output of python3 check.py before claiming it passes."
    model_server.script(default_reply)
    model_server.add(
        {
            "json": {
                "score": 3,
                "verdict": "Unsupported.",
                "unsupported_claims": [],
                "feedback": feedback,
            }
        },
        {"json": {"score": 9, "verdict": "Backed.", "unsupported_claims": [], "feedback": "none"}},
        name="critic_verdict",
    )
    verifier = (
        f'[verifier]\nbase_url = "{model_server.base_url}"\nmodel = "critic-model"\n'
        'timeout = "20s"\njudge_timeout = "20s"\npending_limit = "30s"\n'
    )
    machine = make_machine(
        tmp_path, engine, script_agent(FIX), verifier, critic="on", max_attempts=2
    )
    machines.append(machine)
    machine.start("run")
    proc = machine.loopd("trigger", "calc", "--wait")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    shown = json.loads(machine.loopd("show", run_id, "--json").stdout)
    assert [(a["score"], a["feedback"]) for a in shown["attempts"]] == [(3, feedback), (9, "none")]
    prompt = (machine.home / "state" / "runs" / run_id / "attempt-2" / "prompt.md").read_text()
    assert "# Reviewer feedback" in prompt and feedback in prompt
    assert machine.stop() == 0


def test_a_refuse_rule_ends_the_run_before_any_agent_and_escalates_it(
    tmp_path: Path, engine: str, machines: list
) -> None:
    from daemon.rules.library import RuleLibrary
    from daemon.rules.rulefile import Rule

    folder, writable = talk(tmp_path)
    started = folder / "started"  # writable: the agent, had it run, would have left it
    machine = make_machine(
        tmp_path, engine, script_agent(f"open({str(started)!r}, 'w').write('x')"), writable
    )
    rule = Rule(
        rule="Do not let an agent change `calc.py`: the finance team owns it.",
        why="A person decided so.",
        how_to_apply="Do it.",
        severity="refuse",
        trigger_intent="Tasks that touch calc.py",
        trigger_patterns=[r"(?i)\bcalc\.py\b"],
    )
    rid = RuleLibrary(machine.home / "rules").add(rule, "active").rule.id
    machines.append(machine)
    machine.start("run")
    proc = machine.loopd("trigger", "calc", "--wait")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (run,) = machine.runs()
    assert run["outcome"] == "refused" and rid in run["reason"] and run["attempts"] == []
    assert not started.exists()
    assert (machine.home / "state" / "escalations" / f"{run['id']}.md").is_file()
    assert machine.stop() == 0


def test_pause_holds_the_loops_triggers_and_resume_runs_them(
    tmp_path: Path, engine: str, machines: list
) -> None:
    machine = make_machine(tmp_path, engine, script_agent(FIX))
    machines.append(machine)
    machine.start("run")
    assert machine.loopd("pause", "calc").returncode == 0
    assert machine.loopd("trigger", "calc", "--reason", "while paused").returncode == 0
    wait_for(lambda: machine.events("trigger"), what="the trigger taken")
    status = json.loads(machine.loopd("status", "--json").stdout)
    assert status["loops"]["calc"]["paused"] is True
    assert machine.runs() == []
    assert machine.loopd("resume", "calc").returncode == 0
    (run,) = wait_for(lambda: finished(machine, 1), timeout=60, what="the run")
    assert run["trigger"]["reason"] == "while paused" and run["outcome"] == "succeeded"
    kinds = [e["type"] for e in machine.events()]
    assert "loop_paused" in kinds and "loop_resumed" in kinds
    assert machine.stop() == 0


def test_a_green_base_is_skipped_with_no_agent_and_supersedes_until_force_runs_it(
    tmp_path: Path, engine: str, machines: list
) -> None:
    folder, writable = talk(tmp_path)
    ran = folder / "agent-ran"
    machine = make_machine(
        tmp_path, engine, script_agent(f"open({str(ran)!r}, 'a').write('ran\\n')"), writable
    )
    machines.append(machine)
    machine.start("run")
    # The checks fail on the base: the agent runs, changes nothing, and the run escalates.
    proc = machine.loopd("trigger", "calc", "--wait")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    escalated = proc.stdout.splitlines()[0]
    assert ran.read_text() == "ran\n"
    assert [
        e["run"] for e in json.loads(machine.loopd("escalations", "list", "--json").stdout)
    ] == [escalated]
    # A person fixes the base: the next run finds done_when passing there and ends skipped,
    # with no agent and no tokens; its empty branch is deleted; the escalation is superseded.
    from tests.helpers import git

    (machine.repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git(machine.repo, "commit", "-q", "-am", "fix add")
    base = git(machine.repo, "rev-parse", "HEAD").strip()
    proc = machine.loopd("trigger", "calc", "--wait")
    assert proc.returncode == 0 and "skipped" in proc.stdout, proc.stdout + proc.stderr
    skipped = proc.stdout.splitlines()[0]
    record = next(r for r in machine.runs() if r["id"] == skipped)
    assert (record["outcome"], record["cause"]) == ("skipped", "already-done")
    assert (
        record["reason"] == f"already done: done_when passes on {base[:12]}, where it would start"
    )
    assert record.get("attempts", []) == [] and record["tokens"] == 0
    assert ran.read_text() == "ran\n"
    assert git(machine.repo, "branch", "--list", f"loopd/calc/{skipped}") == ""
    (check,) = [e for e in machine.events("done_check") if e["run"] == skipped]
    assert check["passed"] is True and check["commit"] == base
    assert (
        "python3 check.py" in (machine.home / "state/runs" / skipped / "done-check.log").read_text()
    )
    assert json.loads(machine.loopd("escalations", "list", "--json").stdout) == []
    # --force runs the agent anyway.
    proc = machine.loopd("trigger", "calc", "--wait", "--force")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    forced = next(r for r in machine.runs() if r["id"] == proc.stdout.splitlines()[0])
    assert forced["outcome"] == "succeeded" and forced["trigger"]["force"] is True
    assert ran.read_text() == "ran\nran\n"
    assert not [e for e in machine.events("done_check") if e["run"] == forced["id"]]
    assert machine.stop() == 0


# `setup` makes a file the checks need; it stays out of the run's branch.
MAKES = "echo made by setup > generated.txt"
NEEDS = ["python3 check.py", "grep -q 'made by setup' generated.txt"]


def test_setup_makes_what_the_checks_need_in_the_trees_the_agent_and_checks_use(
    tmp_path: Path, engine: str, machines: list
) -> None:
    machine = make_machine(
        tmp_path, engine, script_agent(FIX), setup=["echo preparing", MAKES], done_when=NEEDS
    )
    machines.append(machine)
    machine.start("run")
    proc = machine.loopd("trigger", "calc", "--wait")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    (run,) = machine.runs()
    assert (run["outcome"], run["cause"]) == ("succeeded", "passed"), run["reason"]
    assert [a["checks_passed"] for a in run["attempts"]] == [True]
    assert "$ " + MAKES in (machine.home / "state/runs" / run_id / "setup.log").read_text()
    # The done check ran after setup (it failed: the bug was there), before the attempt.
    (check,) = [e for e in machine.events("done_check") if e["run"] == run_id]
    assert check["passed"] is False
    from tests.helpers import git

    files = git(machine.repo, "ls-tree", "-r", "--name-only", run["branch"]).splitlines()
    assert "generated.txt" not in files and "calc.py" in files
    assert "a + b" in git(machine.repo, "show", f"{run['branch']}:calc.py")
    assert machine.stop() == 0


def test_a_failing_setup_ends_the_run_error_setup_failed_with_its_log_in_the_escalation(
    tmp_path: Path, engine: str, machines: list
) -> None:
    folder, writable = talk(tmp_path)
    ran = folder / "agent-ran"
    setup = ["echo preparing", "echo no such package >&2; exit 3", "echo never"]
    machine = make_machine(
        tmp_path, engine, script_agent(f"open({str(ran)!r}, 'w').write('x')"), writable,
        setup=setup, skip_if_done=False,
    )  # fmt: skip
    machines.append(machine)
    machine.start("run")
    proc = machine.loopd("trigger", "calc", "--wait")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    (run,) = machine.runs()
    assert (run["outcome"], run["cause"]) == ("error", "setup-failed")
    assert run["reason"].startswith("setup failed") and "exit 3" in run["reason"]
    assert run.get("attempts", []) == [] and not ran.exists()
    log = (machine.home / "state/runs" / run_id / "setup.log").read_text()
    assert "no such package" in log and "never" not in log
    escalation = (machine.home / "state/escalations" / f"{run_id}.md").read_text()
    assert "## Setup (tail of setup.log)" in escalation and "no such package" in escalation
    assert machine.stop() == 0


def test_the_console_has_a_line_for_each_run_start_end_and_escalation(
    tmp_path: Path, engine: str, machines: list
) -> None:
    machine = make_machine(tmp_path, engine, script_agent(IDLE))
    machines.append(machine)
    machine.start("run")
    proc = machine.loopd("trigger", "calc", "--reason", "from a test", "--wait")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    lines = [
        f"loopd: run {run_id} started (loop calc, manual: from a test)",
        f"loopd: run {run_id} ended escalated: attempts used up; checks still fail after 1 attempt",
        f"loopd: run {run_id} escalated (checks-failed): state/escalations/{run_id}.md",
    ]
    wait_for(lambda: all(line in machine.log.read_text() for line in lines), what="the lines")
    # A repeat counts in the open escalation: its line names that file, which exists.
    again = machine.loopd("trigger", "calc", "--wait")
    assert again.returncode == 1, again.stdout + again.stderr
    repeat = again.stdout.splitlines()[0]
    line = (
        f"loopd: run {repeat} escalated (checks-failed): counted in open escalation "
        f"{run_id}, state/escalations/{run_id}.md, or `loopd show {repeat}`"
    )
    wait_for(lambda: line in machine.log.read_text(), what="the repeat's line")
    named = [n for n in machine.log.read_text().split() if n.startswith("state/escalations/")]
    assert named and all((machine.home / n.rstrip(",")).exists() for n in named), named


LINKER = (
    "import os, pathlib\n"
    "kept = pathlib.Path(os.environ['HOME']) / 'fixed_calc.py'\n"
    "kept.write_text('def add(a, b):\\n    return a + b\\n')\n"
    "os.remove('calc.py')\n"
    "os.symlink(kept, 'calc.py')\n"
)


def test_a_link_into_the_agents_home_fails_the_attempt_on_either_engine(
    tmp_path: Path, engine: str, machines: list
) -> None:
    """The checks follow no link out of their tree to a copy the branch does not hold."""
    machine = make_machine(tmp_path, engine, script_agent(LINKER))
    machines.append(machine)
    machine.start("run")
    proc = machine.loopd("trigger", "calc", "--wait")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (run,) = machine.runs()
    assert run["outcome"] == "escalated" and run["cause"] == "link-out-of-tree", run["reason"]
    [violation] = run["attempts"][-1]["violations"]
    assert (violation["kind"], violation["target"]) == ("link_out_of_tree", "calc.py")
    assert violation["detail"].endswith("fixed_calc.py")
