"""The small things of the person's side, through the command line: RUN_IDs printed by
`trigger` and `escalations resolve --retry`, queued and parked runs in `runs`,
`rules match TASK`, `notify --test`, `once` on a disabled loop, `init` on an existing home."""

from __future__ import annotations

import json
import shutil
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

from daemon.people.escalation import write_escalation
from daemon.state.records import AttemptRecord, RunRecord, RunTrigger
from daemon.state.store import StateStore
from tests.helpers import ROOT, events, loopd, make_home, make_repo, runs, stop_daemon, wait_for
from tests.test_daemon import BUGGY, FIXER, agent, first_run_at_a_gate, loop_text

RUN_ID = r"^\d{8}T\d{6}Z-calc-[0-9a-f]{4}$"


def test_trigger_prints_the_run_id_it_queued_or_joined(tmp_path: Path, daemons: list) -> None:
    import re

    home, gate, daemon = first_run_at_a_gate(tmp_path, daemons)
    (first,) = runs(home)
    second = loopd(home, "trigger", "calc", "--reason", "second")
    assert second.returncode == 0, second.stdout + second.stderr
    queued_id, how = second.stdout.splitlines()[:2]
    assert re.match(RUN_ID, queued_id) and queued_id != first["id"]
    assert how.startswith("queued for calc") and f"loopd logs {queued_id} -f" in how
    third = loopd(home, "trigger", "calc", "--reason", "third")
    assert third.returncode == 0, third.stderr
    joined_id, how = third.stdout.splitlines()[:2]
    assert joined_id == queued_id and how.startswith("joined the run already queued for calc")
    # `loopd runs` lists the queued run first, from state/queue.toml, with its merge.
    listed = loopd(home, "runs", env={"COLUMNS": "120"})
    assert listed.returncode == 0, listed.stderr
    rows = [line for line in listed.stdout.splitlines() if "-calc-" in line]
    assert queued_id in rows[0] and "queued" in rows[0] and "1 merged" in rows[0]
    as_json = json.loads(loopd(home, "runs", "--json").stdout)
    assert as_json[0]["id"] == queued_id and as_json[0]["phase"] == "queued"
    assert as_json[0]["merged"] == 1
    gate.write_text("go")
    wait_for(lambda: len([r for r in runs(home) if r.get("outcome")]) == 2, timeout=60, what="runs")
    assert {r["id"] for r in runs(home)} == {first["id"], queued_id}
    assert stop_daemon(daemon) == 0


def test_trigger_without_a_daemon_says_it_has_no_run_id_yet(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home", agent(FIXER), {"calc": loop_text(repo)})
    proc = loopd(home, "trigger", "calc")
    assert proc.returncode == 0, proc.stderr
    assert "no daemon is running, so it has no RUN_ID yet" in proc.stdout
    assert len(list((home / "state" / "inbox").glob("*.json"))) == 1


def _escalated_run(home: Path, loop: str = "calc") -> str:
    store = StateStore(home / "state")
    now = datetime.now(UTC)
    run = RunRecord(
        id=store.new_run_id(loop, now),
        loop=loop,
        task="Make check.py pass.",
        trigger=RunTrigger(kind="schedule", reason="nightly"),
        started=now,
        finished=now,
        outcome="escalated",
        reason="attempts used up; checks still fail after 1 attempts",
        attempts=[AttemptRecord(n=1, started=now, finished=now, checks_passed=False)],
        phase="idle",
    )
    store.save_run(run)
    write_escalation(store, run, now)
    return run.id


def test_resolve_retry_prints_the_run_id_of_the_retry(tmp_path: Path, daemons: list) -> None:
    from tests.helpers import start_daemon

    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home", agent(FIXER), {"calc": loop_text(repo)})
    escalated = _escalated_run(home)
    daemon = start_daemon(home)
    daemons.append(daemon)
    proc = loopd(home, "escalations", "resolve", escalated, "--retry", "--note", "try again")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"resolved {escalated}"
    retry_id = lines[1]
    assert retry_id != escalated and "-calc-" in retry_id
    wait_for(
        lambda: any(r["id"] == retry_id and r.get("outcome") for r in runs(home)),
        timeout=60,
        what="the retry",
    )
    (retry,) = [r for r in runs(home) if r["id"] == retry_id]
    assert retry["trigger"]["kind"] == "retry" and retry["trigger"]["retry_of"] == escalated
    assert retry["outcome"] == "succeeded"
    assert stop_daemon(daemon) == 0


def test_runs_lists_parked_runs_first(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    store = StateStore(home / "state")
    now = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)
    done = RunRecord(
        id="20261129T030000Z-app-0002",
        loop="app",
        task="t",
        trigger=RunTrigger(kind="manual"),
        started=now,
        outcome="succeeded",
        phase="idle",
    )
    store.save_run(done)
    parked = RunRecord(
        id="20261129T020000Z-app-0001",
        loop="app",
        task="t",
        trigger=RunTrigger(kind="schedule"),
        started=now,
        phase="waiting",
        reason="usage limit: resets 9am",
        attempts=[AttemptRecord(n=1, started=now)],
    )
    store.save_run(parked)
    store.mark_live(parked.id)
    proc = loopd(home, "runs", env={"COLUMNS": "120"})
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if "-app-" in line]
    assert parked.id in rows[0] and "waiting" in rows[0] and "parked" in rows[0]
    assert done.id in rows[1] and len(rows) == 2  # the parked run is listed once
    data = json.loads(loopd(home, "runs", "--json").stdout)
    assert [(r["id"], r["phase"]) for r in data] == [(parked.id, "waiting"), (done.id, "idle")]


def test_rules_match_takes_the_task_as_an_argument(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    shutil.rmtree(home / "rules")
    shutil.copytree(ROOT / "rules", home / "rules")
    task = "Review app.py and list concrete problems with line numbers."
    positional = loopd(home, "rules", "match", task, "--no-model")
    option = loopd(home, "rules", "match", "--task", task, "--no-model")
    assert positional.returncode == 0, positional.stderr
    assert positional.stdout == option.stdout
    assert "r-0001-grep-count-is-not-a-line-number" in positional.stdout
    both = loopd(home, "rules", "match", task, "--task", "other", "--no-model")
    assert both.returncode == 2 and "not both" in both.stderr
    assert loopd(home, "rules", "match", "--no-model").returncode == 2


class _Hook(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - the http.server name
        length = int(self.headers.get("Content-Length", 0))
        _Hook.received.append(json.loads(self.rfile.read(length)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_notify_test_sends_through_each_notifier_and_says_what_happened(tmp_path: Path) -> None:
    import sys

    got = tmp_path / "got.txt"
    script = tmp_path / "notify.py"
    script.write_text(f"import sys, pathlib; pathlib.Path({str(got)!r}).write_text(sys.argv[-1])\n")
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/hook/SECRET"
        config = f'[notify]\ncommand = ["{sys.executable}", "{script}"]\nwebhook = "{url}"\n'
        home = make_home(tmp_path / "home", config)
        proc = loopd(home, "notify", "--test")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"command {sys.executable!r}: delivered" in proc.stdout
        assert f"webhook 127.0.0.1:{server.server_port}: delivered" in proc.stdout
        assert "SECRET" not in proc.stdout
        assert got.read_text().startswith("loopd test notification from ")
        assert _Hook.received and _Hook.received[-1]["kind"] == "test"
        kinds = [(e["type"], e["kind"]) for e in events(home) if e["type"] == "notified"]
        assert kinds == [("notified", "test"), ("notified", "test")]
    finally:
        server.shutdown()
    # A command that fails, and a webhook nobody answers: said, exit 1, at once (one try).
    dead = f"http://127.0.0.1:{server.server_port}/gone"
    home = make_home(tmp_path / "broken", f'[notify]\ncommand = ["false"]\nwebhook = "{dead}"\n')
    proc = loopd(home, "notify", "--test", timeout=30)
    assert proc.returncode == 1
    assert "command 'false': FAILED: [notify] command 'false' exited 1" in proc.stdout
    assert f"webhook 127.0.0.1:{server.server_port}: FAILED" in proc.stdout
    # Nothing configured: nobody would hear an escalation.
    home = make_home(tmp_path / "none")
    proc = loopd(home, "notify", "--test")
    assert proc.returncode == 2
    assert "[notify] has no command, webhook, urls or plugins" in proc.stderr


def test_once_refuses_a_disabled_loop_without_force(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(
        tmp_path / "home", agent(FIXER), {"calc": loop_text(repo) + "enabled = false\n"}
    )
    proc = loopd(home, "once", "calc")
    assert proc.returncode == 2
    assert "loop 'calc' is disabled" in proc.stderr and "--force" in proc.stderr
    assert not runs(home)
    forced = loopd(home, "once", "calc", "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert runs(home)[0]["outcome"] == "succeeded"
    # A disabled loop with a problem: a warning for `check`, a refusal for `once --force`.
    (home / "loops" / "calc.toml").write_text(
        loop_text(repo).replace('agent = "fixer"', 'agent = "nobody"') + "enabled = false\n"
    )
    check = loopd(home, "check")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "warning:" in check.stdout and "no agent profile 'nobody'" in check.stdout
    refused = loopd(home, "once", "calc", "--force")
    assert refused.returncode == 2 and "no agent profile 'nobody'" in refused.stderr


def test_init_on_an_existing_home_never_writes_back_a_deleted_example(tmp_path: Path) -> None:
    home = tmp_path / "home"
    made = loopd(home.parent, "init", str(home))
    assert made.returncode == 0, made.stderr
    assert (home / "loops" / "example.toml").is_file()
    assert (home / "state" / "README.md").is_file()
    (home / "loops" / "example.toml").unlink()
    (home / "state" / "README.md").unlink()
    again = loopd(home.parent, "init", str(home))
    assert again.returncode == 0, again.stderr
    assert not (home / "loops" / "example.toml").exists()
    assert (home / "state" / "README.md").is_file()  # state's guide comes back
    assert "is a home already" in again.stdout
    check = loopd(home, "check")
    assert check.returncode == 0 and "0 valid loop(s)" in check.stdout
