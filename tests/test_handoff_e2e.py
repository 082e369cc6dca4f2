"""Issue 7 end to end: escalations, notifications, progress notes, the report, systemd.

Everything goes through the real CLI (`loopd once`, `loopd run`, `loopd trigger`,
`loopd escalations`, `loopd report`) on real repositories with `command` agents; the
critic is the scripted OpenAI-compatible server, the webhook a local http.server.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import tomllib
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    ROOT,
    daemon_log,
    events,
    git,
    loopd,
    make_home,
    make_repo,
    runs,
    start_daemon,
    stop_daemon,
    wait_for,
)
from tests.model_server import ScriptedModelServer, call_name

BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5, f'add(2, 3) gave {add(2, 3)}'\n",
}
TASK = "Make check.py pass."
NOTE = "use the v2 API"
CRITIC = {
    "score": 3,
    "verdict": "The agent wrote notes but calc.add still subtracts.",
    "unsupported_claims": [],
    "feedback": "Change the minus in calc.add to a plus.",
}


def agent_script(mode_file: Path, env_file: Path | None = None) -> str:
    """A command agent reading its prompt on stdin; what it does is steered by `mode_file`.

    fix: fixes calc.py; notes: appends to notes.txt; nothing: only talks. A prompt that
    holds the person's note (or the word `contrast` in its trigger) fixes calc.py too.
    """
    lines = [
        "import json, os, pathlib, sys",
        "prompt = sys.stdin.read()",
        f"mode_file = pathlib.Path({str(mode_file)!r})",
        "mode = mode_file.read_text().strip() if mode_file.exists() else 'notes'",
    ]
    if env_file is not None:
        lines.append(f"pathlib.Path({str(env_file)!r}).write_text(json.dumps(dict(os.environ)))")
    lines += [
        f"if {NOTE!r} in prompt or 'contrast' in prompt:",
        "    mode = 'fix'",
        "if mode == 'fix':",
        "    p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))",
        "    print('fixed calc.py')",
        "elif mode == 'notes':",
        "    with open('notes.txt', 'a') as fh: fh.write('looked at calc.py\\n')",
        "    print('I wrote notes.')",
        "else:",
        "    print('I looked at it.')",
    ]
    return "\n".join(lines) + "\n"


def agent_config(script: str, talk: Path | None = None) -> str:
    """The agent's profile; `talk`: the folder outside its tree the sandboxed agent may write."""
    argv = [sys.executable, "-c", script]
    text = f'[agents.fixer]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'
    if talk is not None:
        talk.mkdir(parents=True, exist_ok=True)
        text += f'\n[sandbox]\nwritable = ["{talk}"]\n'
    return text


def loop_text(repo: Path, **extra: object) -> str:
    lines = [
        f'repo = "{repo}"',
        f'task = "{TASK}"',
        'agent = "fixer"',
        'done_when = ["python3 check.py"]',
        'attempt_timeout = "60s"',
        'stall_after = "60s"',
        "max_nudges = 0",
    ]
    lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


NOTIFIER = (
    "import json, sys\n"
    "with open(sys.argv[1], 'a') as fh:\n"
    "    fh.write(json.dumps(sys.argv[2:]) + '\\n')\n"
)


def notify_config(tmp_path: Path, webhook: str) -> tuple[str, Path]:
    """`[notify]` with a python3 script that appends its argv to a file, and a webhook."""
    script = tmp_path / "notifier.py"
    script.write_text(NOTIFIER)
    out = tmp_path / "notified.jsonl"
    argv = ["python3", str(script), str(out), "--from-loopd"]
    return f"[notify]\ncommand = {json.dumps(argv)}\nwebhook = {json.dumps(webhook)}\n", out


def notified(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Webhook:
    """A local http.server that records the JSON bodies POSTed to it."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                owner.posts.append(
                    {"path": self.path, "type": self.headers["Content-Type"], "json": body}
                )
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/loopd"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Webhook:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def dead_url() -> str:
    """A 127.0.0.1 URL where nothing listens (the port was free a moment ago)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/hooks/loopd"


def critic_server() -> ScriptedModelServer:
    """The verifier: a low score for every attempt; learning finds nothing grounded."""

    def answer(body: dict[str, Any]) -> Any:
        name = call_name(body)
        if name == "critic_verdict":
            return {"json": CRITIC}
        if name == "postmortem_rule":
            return {
                "json": {
                    "kind": "failure",
                    "rule": "Never touch `zz_unrelated_helper()` in lib/zz.py.",
                    "why": "The run broke zz_unrelated_helper 42 times.",
                    "how_to_apply": "Leave lib/zz.py alone.",
                    "trigger_intent": "Edits to lib/zz.py",
                    "trigger_patterns": ["zz_unrelated"],
                    "severity": "remind",
                    "evidence": [],
                }
            }
        if name == "rule_verification":
            return {
                "json": {"grounded": False, "unsupported": [], "contradicts": [], "reason": "no"}
            }
        if name == "trigger_matches":
            return {"json": {"matches": []}}
        return {"status": 400, "message": f"unexpected call {name}"}

    return ScriptedModelServer(answer)


def run_dir(home: Path, run_id: str) -> Path:
    return home / "state" / "runs" / run_id


def finished_runs(home: Path, count: int) -> list[dict]:
    found = runs(home)
    return found if len(found) >= count and all(r.get("outcome") for r in found) else []


def by_id(home: Path, run_id: str) -> dict:
    (run,) = [r for r in runs(home) if r["id"] == run_id]
    return run


def escalation_text(home: Path, run_id: str) -> str:
    return (home / "state" / "escalations" / f"{run_id}.md").read_text()


# 1. A run that fails every attempt -------------------------------------------------------------


def test_a_run_that_fails_every_attempt_is_handed_to_a_person(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    mode = tmp_path / "talk" / "mode"
    mode.parent.mkdir(exist_ok=True)
    mode.write_text("notes")
    with critic_server() as model, Webhook() as hook:
        notify, out = notify_config(tmp_path, hook.url)
        config = (
            agent_config(agent_script(mode), mode.parent)
            + f'[verifier]\nbase_url = "{model.base_url}"\nmodel = "critic"\ntimeout = "10s"\n'
            + notify
        )
        home = make_home(tmp_path / "home", config, {"calc": loop_text(repo, max_attempts=2)})
        proc = loopd(home, "once", "calc", "--reason", "nightly", timeout=90)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        run_id = proc.stdout.splitlines()[0]
        check_escalation_file(home, repo, run_id)
        # Delivered before `loopd once` exits: its notifier threads must not die with it.
        delivered = sorted(e["notifier"] for e in events(home) if e["type"] == "notified")
        messages, posts = notified(out), list(hook.posts)
    assert delivered == ["command", "webhook"], events(home)[-4:]

    # One notification through the command: the message is the last argument.
    (argv,) = messages
    assert argv[0] == "--from-loopd" and len(argv) == 2
    message = argv[-1]
    assert message.startswith("loopd: calc needs a person:")
    assert "best score 3/10" in message and f"escalations/{run_id}.md" in message
    # And one POST to the webhook, carrying the escalation.
    (post,) = posts
    assert post["path"] == "/hooks/loopd" and post["type"] == "application/json"
    payload = json.loads(post["json"])
    assert payload["kind"] == "escalated" and payload["run"] == run_id
    assert payload["text"] == message
    assert payload["branch"] == f"loopd/calc/{run_id}"
    assert [a["score"] for a in payload["attempts"]] == [3, 3]
    assert payload["escalation"] == escalation_text(home, run_id)


def check_escalation_file(home: Path, repo: Path, run_id: str) -> None:
    """The escalation file alone is enough to act on; the CLI lists and shows it."""
    (run,) = runs(home)
    assert run["id"] == run_id and run["outcome"] == "escalated"
    assert [(a["checks_passed"], a["score"]) for a in run["attempts"]] == [(False, 3), (False, 3)]
    text = escalation_text(home, run_id)
    front = tomllib.loads(text.split("+++\n")[1])
    assert front["status"] == "open" and front["run"] == run_id and front["loop"] == "calc"
    assert front["branch"] == f"loopd/calc/{run_id}" and front["attempts"] == 2
    assert front["cause"] == "checks-failed" and front["best_score"] == 3
    body = text.split("\n+++\n", 1)[1]
    assert "## Task" in body and f"> {TASK}" in body
    for n in (1, 2):
        assert f"### Attempt {n}: checks failed, score 3/10" in body
    assert body.count(CRITIC["verdict"]) == 2 and body.count(CRITIC["feedback"]) == 2
    assert "## Last failure of the checks (attempt 2" in body
    assert "add(2, 3) gave -1" in body
    assert f"Branch `loopd/calc/{run_id}` in {repo}" in body
    assert "notes.txt (+1 -0)" in body and "1 file changed" in body
    suggestion = body.split("**Suggested next step:**", 1)[1].split("\n", 1)[0]
    assert "checks still fail after 2 attempts" in suggestion
    assert f"loopd escalations resolve {run_id} --retry" in suggestion
    # The branch it names holds what it says.
    assert "looked at calc.py" in git(repo, "show", f"loopd/calc/{run_id}:notes.txt")
    types = [e["type"] for e in events(home) if e.get("run") == run_id]
    assert types.count("escalated") == 1

    listed = loopd(home, "escalations", "list")
    assert listed.returncode == 0 and run_id in listed.stdout and "checks-failed" in listed.stdout
    shown = loopd(home, "escalations", "show", run_id)
    assert shown.returncode == 0 and shown.stdout == body
    as_json = json.loads(loopd(home, "escalations", "show", run_id, "--json").stdout)
    assert as_json["status"] == "open" and as_json["text"] == text
    assert loopd(home, "escalations", "show", "20990101T000000Z-calc-0000").returncode == 2


def test_a_dead_webhook_does_not_block_the_run_and_its_failure_is_an_event(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    mode = tmp_path / "talk" / "mode"
    mode.parent.mkdir(exist_ok=True)
    mode.write_text("nothing")
    notify, out = notify_config(tmp_path, dead_url())
    home = make_home(
        tmp_path / "home",
        agent_config(agent_script(mode), mode.parent) + notify,
        {"calc": loop_text(repo, max_attempts=1)},
    )
    daemon = start_daemon(home)
    daemons.append(daemon)
    proc = loopd(home, "trigger", "calc", "--wait", timeout=90)
    assert proc.returncode == 1, proc.stdout + proc.stderr + daemon_log(home)
    run_id = proc.stdout.splitlines()[0]
    (run,) = runs(home)
    assert run["outcome"] == "escalated" and run["finished"]
    assert (home / "state" / "escalations" / f"{run_id}.md").is_file()
    # The command still delivers while the webhook waits to retry.
    wait_for(lambda: notified(out), timeout=20, what="the notify command")
    assert daemon.poll() is None
    # Stopping cuts the webhook's backoff short: its failure is an event before loopd exits.
    assert stop_daemon(daemon) == 0
    (event,) = [e for e in events(home) if e["type"] == "notify_failed"]
    assert event["run"] == run_id and event["notifier"] == "webhook"
    assert event["kind"] == "escalated" and "127.0.0.1" in event["error"]
    finished_at = next(
        i for i, e in enumerate(events(home)) if e["type"] == "run_finished" and e["run"] == run_id
    )
    failed_at = next(i for i, e in enumerate(events(home)) if e["type"] == "notify_failed")
    assert finished_at < failed_at  # the run did not wait for the webhook


# 2. Resolve with a note, and the schedule held back while an escalation is open ----------------


def schedule_trigger(home: Path, name: str) -> str:
    """An inbox file of kind "schedule", as the cron timer's trigger would be."""
    now = datetime.now(UTC)
    data = {"loop": "calc", "kind": "schedule", "reason": "cron 0 2 * * *", "ts": now.isoformat()}
    inbox = home / "state" / "inbox"
    tmp = inbox / f".{name}.tmp"
    tmp.write_text(json.dumps(data))
    tmp.rename(inbox / f"{name}.json")
    return f"{name}.json"


def test_resolve_retry_with_a_note_and_the_schedule_held_while_open(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    mode = tmp_path / "talk" / "mode"
    mode.parent.mkdir(exist_ok=True)
    mode.write_text("nothing")
    home = make_home(
        tmp_path / "home",
        agent_config(agent_script(mode), mode.parent),
        {"calc": loop_text(repo, max_attempts=1)},
    )
    daemon = start_daemon(home)
    daemons.append(daemon)
    proc = loopd(home, "trigger", "calc", "--reason", "first", "--wait", timeout=90)
    assert proc.returncode == 1, proc.stdout + proc.stderr + daemon_log(home)
    first = proc.stdout.splitlines()[0]
    assert json.loads(loopd(home, "escalations", "list", "--json").stdout)[0]["run"] == first

    # A scheduled run of the same task does not start while the escalation is open...
    held = schedule_trigger(home, "20990101T020000000000Z-held")
    skipped = wait_for(
        lambda: [e for e in events(home) if e["type"] == "trigger_skipped" and e["inbox"] == held],
        what="the held schedule trigger",
    )
    assert skipped[0]["kind"] == "schedule" and "escalation" in skipped[0]["why"]
    assert len(runs(home)) == 1

    # Resolve with a note: the retry's first prompt carries it.
    proc = loopd(home, "escalations", "resolve", first, "--retry", "--note", NOTE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"resolved {first}"
    retry_id = lines[1]  # the retry's RUN_ID, as the daemon queued it
    wait_for(lambda: finished_runs(home, 2), timeout=60, what="the retry")
    retry = by_id(home, retry_id)
    assert retry["trigger"]["kind"] == "retry" and retry["trigger"]["retry_of"] == first
    assert retry["trigger"]["note"] == NOTE
    assert retry["outcome"] == "succeeded"
    prompt = (run_dir(home, retry["id"]) / "attempt-1" / "prompt.md").read_text()
    assert f"# Note from a person\n\n{NOTE}\n" in prompt
    assert prompt.index("# Task") < prompt.index("# Note from a person")
    (resolved,) = [e for e in events(home) if e["type"] == "escalation_resolved"]
    assert resolved["run"] == first and resolved["note"] == NOTE and resolved["retry"] is True
    assert loopd(home, "escalations", "list", "--json").stdout.strip() == "[]"
    assert "## Resolved" in escalation_text(home, first)
    again = loopd(home, "escalations", "resolve", first)
    assert again.returncode == 1 and "already resolved" in again.stderr

    # A second failure is escalated; a person's trigger still runs while it is open, and its
    # success closes the escalation as superseded.
    proc = loopd(home, "trigger", "calc", "--reason", "second", "--wait", timeout=90)
    assert proc.returncode == 1, proc.stdout + proc.stderr + daemon_log(home)
    second = proc.stdout.splitlines()[0]
    assert [e["run"] for e in json.loads(loopd(home, "escalations", "--json").stdout)] == [second]
    proc = loopd(home, "trigger", "calc", "--reason", "contrast", "--wait", timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr + daemon_log(home)
    contrast = proc.stdout.splitlines()[0]
    assert by_id(home, contrast)["trigger"]["kind"] == "manual"
    assert loopd(home, "escalations", "list", "--json").stdout.strip() == "[]"
    everything = json.loads(loopd(home, "escalations", "list", "--all", "--json").stdout)
    assert [(e["run"], e["status"], e["note"], e["superseded_by"]) for e in everything] == [
        (first, "resolved", NOTE, ""),
        (second, "superseded", "", contrast),
    ]

    # Closed: the schedule runs the task again.
    mode.write_text("fix")
    ran = schedule_trigger(home, "20990101T030000000000Z-ran")
    wait_for(lambda: finished_runs(home, 5), timeout=60, what="the scheduled run")
    (fifth,) = [r for r in runs(home) if r["id"] not in (first, retry_id, second, contrast)]
    assert fifth["trigger"]["kind"] == "schedule" and fifth["outcome"] == "succeeded"
    assert any(e["type"] == "trigger" and e.get("inbox") == ran for e in events(home))
    assert stop_daemon(daemon) == 0


# 3 and 6. A night of scripted runs: progress notes and the report --------------------------------


# The night is run once: its tests stay on one worker under pytest-xdist (--dist loadgroup).
NIGHT = pytest.mark.xdist_group("night")


@pytest.fixture(scope="module")
def night(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Runs with different outcomes through `loopd once`, as a night of cron would leave them."""
    tmp = tmp_path_factory.mktemp("night")
    repo = make_repo(tmp / "repo", BUGGY)
    docs = make_repo(tmp / "docs", {"README.md": "docs\n", "check.py": "pass\n"})
    (docs / "README.md").write_text("a local edit\n")  # in-place on a dirty tree: error
    mode = tmp / "talk" / "mode"
    mode.parent.mkdir(exist_ok=True)
    home = make_home(
        tmp / "home",
        agent_config(agent_script(mode), mode.parent),
        {
            "calc": loop_text(repo, max_attempts=1),
            "docs": loop_text(docs, isolation="in-place"),
        },
    )
    out: dict[str, Any] = {"home": home, "repo": repo, "ids": []}
    for step in ("notes", "fix", "nothing"):
        mode.write_text(step)
        proc = loopd(home, "once", "calc", "--reason", f"night {step}", timeout=90)
        assert proc.returncode == (0 if step == "fix" else 1), proc.stdout + proc.stderr
        out["ids"].append(proc.stdout.splitlines()[0])
    out["progress"] = (home / "state" / "progress" / "calc.md").read_text()
    mode.write_text("fix")
    proc = loopd(home, "once", "calc", "--reason", "night four", timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out["fourth"] = proc.stdout.splitlines()[0]
    proc = loopd(home, "once", "docs", timeout=90)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out["docs"] = proc.stdout.splitlines()[0]
    return out


@NIGHT
def test_progress_notes_after_three_runs_go_into_the_fourth_prompt(night: dict[str, Any]) -> None:
    home: Path = night["home"]
    notes_run, fixed_run, idle_run = night["ids"]
    progress: str = night["progress"]
    assert progress.startswith("# Progress: calc\n")
    last_runs = progress.split("## Last runs (newest first)\n\n", 1)[1].split("\n\n", 1)[0]
    lines = last_runs.splitlines()
    assert [line.split(" run ", 1)[1].split(",", 1)[0] for line in lines] == [
        idle_run,
        fixed_run,
        notes_run,
    ]
    assert "**escalated**" in lines[0] and "checks failed" in lines[0]
    assert "**succeeded**" in lines[1] and "checks passed" in lines[1]
    assert "**escalated**" in lines[2]
    assert f"branch `loopd/calc/{fixed_run}`" in lines[1]
    # What the last diff changed: the newest run that left a diff is the fix.
    changed = progress.split("## What the last diff changed\n\n", 1)[1].split("\n## ", 1)[0]
    assert f"Run {fixed_run}, attempt 1" in changed and "calc.py (+1 -1)" in changed
    failing = progress.split("## Checks that still fail\n\n", 1)[1].split("\n## ", 1)[0]
    assert f"Run {idle_run}, attempt 1" in failing and "add(2, 3) gave -1" in failing
    waiting = progress.split("## Open escalations\n\n", 1)[1].split("\n## ", 1)[0]
    # The fix superseded the first escalation of the task; the third run's stays open.
    assert f"run {idle_run}:" in waiting and notes_run not in waiting
    assert fixed_run not in waiting
    assert "## Rules learned" in progress

    # Run 4's first prompt holds those notes, under `# Progress so far`, after the task.
    prompt = (run_dir(home, night["fourth"]) / "attempt-1" / "prompt.md").read_text()
    assert prompt.startswith("# Task\n\nMake check.py pass.")
    section = prompt.split("# Progress so far\n\n", 1)[1]
    body = progress.split("\n", 1)[1].strip()
    assert section.startswith(body + "\n")
    assert prompt.index("# Task") < prompt.index("# Progress so far")
    # And the notes are rebuilt after run 4.
    now = (home / "state" / "progress" / "calc.md").read_text()
    assert f"run {night['fourth']}, manual: **succeeded**" in now


@NIGHT
def test_the_morning_report_fits_one_screen_and_matches_state(night: dict[str, Any]) -> None:
    home: Path = night["home"]
    state = runs(home)
    open_ids = sorted(
        p.stem
        for p in (home / "state" / "escalations").glob("*.md")
        if 'status = "open"' in p.read_text()
    )
    # calc's escalations were superseded by the later successes; docs' stays open.
    assert len(state) == 5 and open_ids == [night["docs"]]

    as_json = loopd(home, "report", "--since", "12h", "--json")
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    assert [(r["id"], r["outcome"], r["attempts"]) for r in report["runs"]] == [
        (r["id"], r["outcome"], len(r["attempts"])) for r in sorted(state, key=lambda r: r["id"])
    ]
    loops = {s["loop"]: s for s in report["loops"]}
    assert loops["calc"]["runs"] == 4
    assert loops["calc"]["outcomes"] == {"succeeded": 2, "escalated": 2}
    assert loops["docs"]["outcomes"] == {"error": 1}
    assert sorted(e["run"] for e in report["escalations"]) == open_ids
    assert report["events"]["run_finished"] == 5
    markdown = Path(report["file"]).read_text()
    assert all(run["id"] in markdown for run in state)

    shown = loopd(home, "report", env={"COLUMNS": "100", "LINES": "40"})
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert len(lines) <= 40 and max(len(line) for line in lines) <= 100, shown.stdout
    assert lines[0].startswith("loopd report")
    text = shown.stdout
    calc_row = next(line for line in lines if line.startswith("calc "))
    assert " 4 " in calc_row and "2 succeeded, 2 escalated" in calc_row
    assert "docs" in text and "1 error" in text
    assert "Runs not succeeded (3)" in text
    assert "Escalations waiting 1" in text
    for run_id in open_ids:
        assert run_id in text


# 4. systemd: the notify protocol over a real datagram socket -----------------------------------


def test_loopd_run_speaks_sd_notify_and_the_agent_does_not_inherit_the_socket(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    mode = tmp_path / "talk" / "mode"
    mode.parent.mkdir(exist_ok=True)
    mode.write_text("fix")
    env_file = tmp_path / "talk" / "agent-env.json"
    home = make_home(
        tmp_path / "home",
        agent_config(agent_script(mode, env_file), mode.parent),
        {"calc": loop_text(repo)},
    )
    # AF_UNIX paths are short (108 bytes): the socket lives in a short folder of its own.
    folder = Path(tempfile.mkdtemp(prefix="loopd-sd-", dir="/tmp"))
    path = folder / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(15)  # a bound on a broken test, not a timed assertion
    env = dict(os.environ)
    env.pop("LOOPD_HOME", None)
    env.update(NOTIFY_SOCKET=str(path), WATCHDOG_USEC="2000000")
    log = (home / "daemon.log").open("a")
    # systemd sets WATCHDOG_PID to the main pid: a wrapper exports its own pid, then execs.
    daemon = subprocess.Popen(
        [
            "/bin/sh",
            "-c",
            'WATCHDOG_PID=$$; export WATCHDOG_PID; exec "$0" "$@"',
            sys.executable,
            "-m",
            "daemon.cli.main",
            "--home",
            str(home),
            "run",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
        text=True,
    )
    daemons.append(daemon)
    try:
        seen: list[str] = []

        def receive() -> list[str]:
            fields = sock.recv(4096).decode().split("\n")
            seen.append(" ".join(fields))
            return fields

        assert receive()[0] == "READY=1", daemon_log(home)
        while seen.count("WATCHDOG=1") < 2:
            receive()
        # A run in between: the agent's environment has none of systemd's variables.
        proc = loopd(home, "trigger", "calc", "--wait", timeout=90)
        assert proc.returncode == 0, proc.stdout + proc.stderr + daemon_log(home)
        agent_env = json.loads(env_file.read_text())
        for key in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
            assert key not in agent_env
        pings = seen.count("WATCHDOG=1")
        while seen.count("WATCHDOG=1") < pings + 1:
            receive()  # the pings go on after the run
        daemon.send_signal(signal.SIGTERM)
        while "STOPPING=1" not in seen:
            receive()
        assert daemon.wait(timeout=30) == 0
    finally:
        sock.close()
        path.unlink(missing_ok=True)
        folder.rmdir()
        log.close()
    assert seen[0] == "READY=1"
    statuses = [s for s in seen if s.startswith("STATUS=")]
    assert statuses and "1 loop(s)" in statuses[0]
    assert seen.index("STOPPING=1") > max(i for i, s in enumerate(seen) if s == "WATCHDOG=1")
    assert all(
        s == "STOPPING=1" or s.startswith("STATUS=") for s in seen[seen.index("STOPPING=1") :]
    )


def test_loopd_once_with_a_dead_webhook_ends_and_records_the_failure(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    mode = tmp_path / "talk" / "mode"
    mode.parent.mkdir(exist_ok=True)
    mode.write_text("nothing")
    notify, out = notify_config(tmp_path, dead_url())
    home = make_home(
        tmp_path / "home",
        agent_config(agent_script(mode), mode.parent) + notify,
        {"calc": loop_text(repo, max_attempts=1)},
    )
    proc = loopd(home, "once", "calc", timeout=90)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    assert runs(home)[0]["outcome"] == "escalated"
    # `loopd once` waits (bounded) for its notifications, so the failure is recorded.
    assert len(notified(out)) == 1
    outcomes = {e["notifier"]: e["type"] for e in events(home) if e.get("notifier")}
    assert outcomes == {"command": "notified", "webhook": "notify_failed"}, events(home)[-3:]
    (failed,) = [e for e in events(home) if e["type"] == "notify_failed"]
    assert failed["run"] == run_id and failed["kind"] == "escalated"
