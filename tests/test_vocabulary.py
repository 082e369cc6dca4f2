"""The typed vocabulary: event types and their models, docs/events.md, resumable phases."""

from __future__ import annotations

import ast
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import get_args

import pytest

from daemon.runparts import decisions
from daemon.state import eventdoc
from daemon.state.events import STRICT_ENV, EventFieldsMismatch, EventLog
from daemon.state.eventtypes import Event, UnknownEvent, models
from daemon.state.records import AttemptRecord, Park, Phase, RunRecord, RunTrigger

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 11, 29, 2, 14, tzinfo=UTC)


def test_every_event_type_has_a_model_and_the_docs_list_them_all() -> None:
    assert set(models()) == set(Event)
    for event, model in models().items():
        assert model.type is event
        assert model.model_json_schema()  # it builds (they are built at their first event)
        assert (model.__doc__ or "").strip(), f"{event}: its model says what it means"
    written = (ROOT / "docs" / "events.md").read_text(encoding="utf-8")
    assert written == eventdoc.render(), "run `python -m daemon.state.eventdoc`"
    for event in Event:
        assert f"### `{event.value}`" in written


def _event_type_arguments() -> list[tuple[str, ast.expr]]:
    """The type argument of every event written in daemon/, with where it is."""
    out = []
    for path in sorted((ROOT / "daemon").rglob("*.py")):
        if "eventtypes" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            if isinstance(func, ast.Attribute):
                name, receiver = func.attr, ast.unparse(func.value)
            elif isinstance(func, ast.Name):
                name, receiver = func.id, ""
            else:
                continue
            writes = name == "event" or (name == "append" and "event" in receiver.lower())
            if writes or (name == "record" and path.name == "intake.py"):
                out.append((f"{path.relative_to(ROOT)}:{node.lineno}", node.args[0]))
    return out


def test_every_event_written_names_its_type_by_a_member_of_Event() -> None:
    found = _event_type_arguments()
    assert len(found) > 150
    for where, arg in found:
        if isinstance(arg, ast.Constant):
            assert not isinstance(arg.value, str), f"{where}: Event.{str(arg.value).upper()}"
        for part in (arg.body, arg.orelse) if isinstance(arg, ast.IfExp) else (arg,):
            if isinstance(part, ast.Attribute) and ast.unparse(part.value) == "Event":
                assert part.attr in Event.__members__, where


def test_an_unknown_type_raises_and_the_line_stays_as_it_was(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    with pytest.raises(UnknownEvent, match="no_such_event"):
        log.append("no_such_event", NOW)
    log.append(Event.RUN_STARTED, NOW, loop="a", run="r", trigger="manual", reason="x")
    log.append("run_started", NOW, loop="a", run="r", trigger="manual", reason="x")
    first, second = (tmp_path / "events.jsonl").read_bytes().splitlines()
    assert first == second
    assert json.loads(first) == {
        "ts": "2026-11-29T02:14:00.000000Z",
        "type": "run_started",
        "loop": "a",
        "run": "r",
        "trigger": "manual",
        "reason": "x",
    }


def test_fields_off_their_model_raise_in_tests_and_only_warn_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    with pytest.raises(EventFieldsMismatch, match="attempt"):
        log.append(Event.ATTEMPT_STARTED, NOW, attemtp=1)
    monkeypatch.delenv(STRICT_ENV)
    log.append(Event.STALL, NOW, attempt="one", kind="silence", detail="")
    log.append(Event.STALL, NOW, attempt="two", kind="silence", detail="")
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["attempt"] for line in lines] == ["one", "two"]  # written as given
    err = capsys.readouterr().err
    assert err.count("warning: event stall") == 1 and "attempt" in err


def _left(phase: Phase) -> RunRecord:
    """A run a loopd left live in `phase`, with what resuming there needs."""
    attempt = AttemptRecord(n=1, started=NOW, finished=None if phase == "waiting" else NOW)
    park = Park(profile="p", attempt=1, started=NOW, since=NOW) if phase == "waiting" else None
    trigger = RunTrigger(kind="manual")
    return RunRecord(
        id="r", loop="a", task="t", trigger=trigger, started=NOW, phase=phase,
        attempts=[attempt], park=park,
    )  # fmt: skip


def test_a_stop_and_a_crash_in_one_phase_both_resume_the_run_or_both_end_it() -> None:
    assert decisions.RESUMABLE_AFTER_STOP == decisions.RESUMABLE_AFTER_CRASH
    assert decisions.RESUMABLE_AFTER_STOP == {"judging", "learning", "waiting"}
    for phase in get_args(Phase):
        after_stop = decisions.stopped("interrupted", phase, "manual")
        after_crash = decisions.left_live(_left(phase))
        assert (after_stop is None) == (phase in decisions.RESUMABLE_AFTER_STOP), phase
        assert after_stop == after_crash, phase


def test_a_record_without_what_resuming_needs_ends_interrupted_after_a_crash() -> None:
    judging = _left("judging")
    judging.attempts[-1].finished = None  # the agent was still working
    parked = _left("waiting")
    parked.park = None
    for run in (judging, parked):
        ending = decisions.left_live(run)
        assert ending is not None and ending.outcome == "interrupted"


def test_outside_the_tests_an_unknown_type_is_written_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """At night a mistake in loopd's vocabulary costs a warning, never the run."""
    from daemon.state.events import STRICT_ENV

    monkeypatch.delenv(STRICT_ENV, raising=False)
    log = EventLog(tmp_path / "events.jsonl")
    log.append("brand_new_thing", NOW, loop="a", detail=1)
    log.append("brand_new_thing", NOW, loop="a", detail=2)
    lines = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(e["type"], e["detail"]) for e in lines] == [
        ("brand_new_thing", 1),
        ("brand_new_thing", 2),
    ]
    assert capsys.readouterr().err.count("unknown event type 'brand_new_thing'") == 1
