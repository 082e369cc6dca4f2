"""A lesson the model could not take (the endpoint down during the post-mortem) is kept and
taken up again once the endpoint answers."""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from daemon.runparts.journal import RunJournal
from daemon.runs.learning import deferred_lessons, learn_from_attempt, retry_deferred_lessons
from daemon.state.records import AttemptRecord
from tests.helpers import events, start_daemon, stop_daemon, wait_for
from tests.model_server import ScriptedModelServer, call_name
from tests.test_run_lifecycle import make_case

GENERIC = {
    "kind": "failure",
    "rule": "Be more careful with the task.",
    "why": "It failed.",
    "how_to_apply": "Think before acting.",
    "trigger_intent": "Any task",
    "trigger_patterns": [],
    "severity": "remind",
    "evidence": [{"path": "prompt.md", "line": 1, "quote": "# Task"}],
}


def test_a_lesson_deferred_while_the_model_is_down_is_learned_when_it_answers(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    def reply(body: dict[str, Any]) -> Any:
        if call_name(body) == "postmortem_rule":
            return {"json": GENERIC}
        return {"status": 400, "message": "not expected"}

    model_server.script(reply)
    case = make_case(tmp_path, server=model_server)
    run = case.new_run()
    now = datetime.now(UTC)
    attempt = AttemptRecord(n=1, started=now, finished=now, checks_passed=False, score=2)
    run.attempts = [attempt]
    case.store.save_run(run)
    folder = case.store.attempt_dir(run.id, 1)
    (folder / "prompt.md").write_text("# Task\n\nMake check.py pass.\n")
    (folder / "checks.log").write_text("$ python3 check.py\nAssertionError: add(2, 3) gave -1\n")

    model_server.down = "503"
    journal = RunJournal(case.services, run)
    assert learn_from_attempt(case.services, journal, 2, attempt, passed=False) is None
    (path,) = deferred_lessons(case.services)
    assert path.name == f"{run.id}-1.toml"
    (deferred,) = case.events(run.id, "rule_deferred")
    assert deferred["file"] == f"deferred/{path.name}"
    assert retry_deferred_lessons(case.services) == 0  # still down: kept, counted
    assert tomllib.loads(path.read_text())["tries"] == 2

    model_server.down = None
    asked = len(model_server.chat_requests("postmortem_rule"))
    assert retry_deferred_lessons(case.services) == 1
    assert deferred_lessons(case.services) == []
    (learned,) = case.events(run.id, "rule_deferred_learned")
    assert learned["attempt"] == 1 and learned["decision"] == "rejected"
    assert len(model_server.chat_requests("postmortem_rule")) == asked + 1
    assert list((case.home.rules_dir / "rejected").glob("*.md"))


def test_a_deferred_lesson_whose_attempt_is_gone_is_dropped_with_an_event(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    case = make_case(tmp_path, server=model_server)
    folder = case.store.root / "deferred"
    folder.mkdir()
    (folder / "20260101T000000Z-calc-0000-1.toml").write_text(
        'run = "20260101T000000Z-calc-0000"\nloop = "calc"\nattempt = 1\n'
        "created = 2026-01-01T00:00:00Z\n"
    )
    (folder / "broken.toml").write_bytes(b"\xff")
    assert retry_deferred_lessons(case.services) == 0
    assert deferred_lessons(case.services) == []
    dropped = [e for e in case.store.events.read() if e["type"] == "rule_deferred_dropped"]
    assert len(dropped) == 2
    assert model_server.chat_requests("postmortem_rule") == []


def test_the_daemon_takes_up_a_deferred_lesson_once_the_model_answers(
    tmp_path: Path, model_server: ScriptedModelServer, daemons: list
) -> None:
    def reply(body: dict[str, Any]) -> Any:
        if call_name(body) == "postmortem_rule":
            return {"json": GENERIC}
        return {"status": 400, "message": "not expected"}

    model_server.script(reply)
    case = make_case(tmp_path, server=model_server)
    run = case.new_run()
    now = datetime.now(UTC)
    attempt = AttemptRecord(n=1, started=now, finished=now, checks_passed=False, score=2)
    run.attempts = [attempt]
    run.outcome = "escalated"
    case.store.save_run(run)
    folder = case.store.attempt_dir(run.id, 1)
    (folder / "prompt.md").write_text("# Task\n\nMake check.py pass.\n")
    (folder / "checks.log").write_text("$ python3 check.py\nAssertionError: add(2, 3) gave -1\n")
    model_server.down = "503"
    learn_from_attempt(case.services, RunJournal(case.services, run), 2, attempt, passed=False)
    assert deferred_lessons(case.services)

    model_server.down = None
    daemons.append(start_daemon(case.home.root))
    wait_for(
        lambda: any(e["type"] == "rule_deferred_learned" for e in events(case.home.root)),
        what="the daemon's housekeeping to take up the deferred lesson",
    )
    assert deferred_lessons(case.services) == []
    stop_daemon(daemons[-1])
