"""events.py on real files: what a line holds (redacted, stamped), types and fields checked
strictly in tests and leniently at night, the log's repair, rotation and what stands in its
place, and EventTail following it across rotations."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from daemon.state import events as events_module
from daemon.state.events import EventFieldsMismatch, EventLog, EventTail, iso, rotated_numbers
from daemon.state.eventtypes import UnknownEvent

NOW = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_iso_writes_utc_with_microseconds() -> None:
    paris = timezone(timedelta(hours=1))
    assert iso(datetime(2026, 11, 30, 3, 0, 0, 5, tzinfo=paris)) == "2026-11-30T02:00:00.000005Z"


def test_a_line_holds_the_stamp_type_loop_run_and_fields_redacted(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "state" / "events.jsonl")
    seen: list[dict] = []
    log.observers.append(seen.append)
    log.observers.append(lambda event: 1 / 0)  # an observer that fails costs nothing
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    event = log.append("tick_error", NOW, loop="l", run="r", error=f"token {secret}")
    written = lines(log.path)
    assert written == [event] == seen
    assert (event["ts"], event["type"], event["loop"], event["run"]) == (
        "2026-11-30T02:00:00.000000Z",
        "tick_error",
        "l",
        "r",
    )
    assert secret not in event["error"] and event["error"].startswith("token ")
    assert list(event) == ["ts", "type", "loop", "run", "error"]
    assert log.read() == written


def test_strict_mode_raises_on_an_unknown_type_or_wrong_fields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    monkeypatch.setenv("LOOPD_STRICT_EVENTS", "1")
    with pytest.raises(UnknownEvent):
        log.append("no_such_event", NOW)
    with pytest.raises(EventFieldsMismatch, match="event tick_error: "):
        log.append("tick_error", NOW, error=3, nonsense="x")
    assert not log.path.exists() or log.read() == []


@pytest.mark.parametrize("value", ["", "0"])
def test_at_night_a_mistake_is_written_as_given_with_one_warning_per_type(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    value: str,
) -> None:
    monkeypatch.setenv("LOOPD_STRICT_EVENTS", value)
    monkeypatch.setattr(events_module, "_warned", set())
    log = EventLog(tmp_path / "events.jsonl")
    log.append("no_such_event", NOW, a=1)
    log.append("no_such_event", NOW, a=2)
    log.append("tick_error", NOW, error=3, nonsense="x")
    log.append("tick_error", NOW, error=4, nonsense="y")
    assert [(e["type"], e.get("a"), e.get("error")) for e in log.read()] == [
        ("no_such_event", 1, None),
        ("no_such_event", 2, None),
        ("tick_error", None, 3),
        ("tick_error", None, 4),
    ]
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "loopd: warning: unknown event type 'no_such_event' (written as given)"
    assert err[1].startswith("loopd: warning: event tick_error: ")
    assert err[1].endswith(" (written as given)")
    assert len(err) == 2


def test_repair_cuts_only_a_torn_last_line(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    log.repair()  # no file yet: nothing to do
    assert not log.path.exists()
    log.path.write_bytes(b"")
    log.repair()
    assert log.path.read_bytes() == b""
    log.path.write_bytes(b'{"a": 1}\n{"b": 2}\n')
    log.repair()
    assert log.path.read_bytes() == b'{"a": 1}\n{"b": 2}\n'
    log.path.write_bytes(b'{"a": 1}\n{"b": 2}\n{"c": ')
    log.repair()
    assert log.path.read_bytes() == b'{"a": 1}\n{"b": 2}\n'
    log.path.write_bytes(b'{"torn": ')
    log.repair()
    assert log.path.read_bytes() == b""
    # A torn line longer than the window read (1 MiB): cut back to the last whole line.
    log.path.write_bytes(b'{"a": 1}\n' + b"x" * (1 << 20))
    log.repair()
    assert log.path.read_bytes() == b""  # no newline within the window: all of it goes
    log.path.write_bytes(b'{"a": 1}\n' + b"x" * 100)
    log.repair()
    assert log.path.read_bytes() == b'{"a": 1}\n'


def test_a_full_log_is_rotated_to_the_next_number(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl", rotate_bytes=200)
    for n in range(12):
        log.append("tick_error", NOW, error=f"e{n}")
    numbers = sorted(rotated_numbers(log.path))
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 3
    (tmp_path / "events-x.jsonl").write_text("")  # not a rotation
    (tmp_path / "worker-events-9.jsonl").write_text("")  # another log's
    assert sorted(rotated_numbers(log.path)) == numbers
    every = []
    for n in numbers:
        every += lines(tmp_path / f"events-{n}.jsonl")
    every += log.read()
    assert [e["error"] for e in every] == [f"e{n}" for n in range(12)]
    assert all(os.path.getsize(tmp_path / f"events-{n}.jsonl") >= 200 for n in numbers)


def test_what_stands_in_the_logs_place_is_set_aside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    os.mkfifo(log.path)
    assert log.read() == []  # a FIFO is never waited on
    log.append("tick_error", NOW, error="after a fifo")
    aside = tmp_path / "events.jsonl.not-a-file"
    assert aside.exists() and not aside.is_file()
    assert [e["error"] for e in log.read()] == ["after a fifo"]
    aside.unlink()
    target = tmp_path / "elsewhere.jsonl"
    target.write_text("")
    log.path.unlink()
    log.path.symlink_to(target)
    log.append("tick_error", NOW, error="after a link")
    assert target.read_text() == ""  # nothing written through the link
    assert aside.is_symlink() and log.path.is_file() and not log.path.is_symlink()
    assert [e["error"] for e in log.read()] == ["after a link"]
    assert capsys.readouterr().err.count("was not a regular file") <= 2


def test_a_tail_reads_whole_new_lines_across_a_rotation(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    tail = EventTail(path)  # before the log exists
    assert tail.read() == []
    log = EventLog(path, rotate_bytes=150)
    log.append("tick_error", NOW, error="one")
    assert [e["error"] for e in tail.read()] == ["one"]
    assert tail.read() == []
    with path.open("ab") as fh:
        fh.write(b'{"type": "partial", "n": ')  # a line still being written
    assert tail.read() == []
    with path.open("ab") as fh:
        fh.write(b"1}\nnot json\n")
    assert tail.read() == [{"type": "partial", "n": 1}]
    got = []
    for n in range(2, 6):  # a rotation between two reads: the rest of the old file, then new
        log.append("tick_error", NOW, error=f"e{n}")
        got += [e["error"] for e in tail.read()]
    assert rotated_numbers(path), "the log rotated"
    assert got == ["e2", "e3", "e4", "e5"]
    later = EventTail(path)  # starts at the end: only what comes after it
    log.append("tick_error", NOW, error="e6")
    assert [e["error"] for e in later.read()] == ["e6"]
    assert [e["error"] for e in tail.read()] == ["e6"]


def test_a_tail_skips_what_is_no_file_and_a_rotation_it_cannot_find(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    log.append("tick_error", NOW, error="one")
    tail = EventTail(path)
    path.rename(tmp_path / "moved-away.jsonl")  # not an events-N.jsonl: gone for the tail
    os.mkfifo(path)
    assert tail.read() == []  # never read from a FIFO
    path.unlink()
    log.append("tick_error", NOW, error="two")
    assert [e["error"] for e in tail.read()] == ["two"]


def test_a_tail_reads_the_rest_of_a_rotated_file_before_the_new_one(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path, rotate_bytes=150)
    tail = EventTail(path)
    log.append("tick_error", NOW, error="one")
    assert [e["error"] for e in tail.read()] == ["one"]
    log.append("tick_error", NOW, error="two")  # still under 150 bytes before it: no rotation
    log.append("tick_error", NOW, error="three")  # rotates first: lands in a new file
    assert rotated_numbers(path) == [1]
    assert [e["error"] for e in tail.read()] == ["two", "three"]
    with path.open("ab") as fh:
        fh.write(b'not json\n{"n": 1}\n{"n": 2}\n')
    assert tail.read() == [{"n": 1}, {"n": 2}]


def test_lines_are_utf8_and_any_value_is_written_as_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOPD_STRICT_EVENTS", "0")
    monkeypatch.setattr(events_module, "_warned", {"no_such_event"})
    log = EventLog(tmp_path / "events.jsonl")
    log.append("tick_error", NOW, error="café ✓")
    log.append("no_such_event", NOW, where=tmp_path, when=NOW)
    raw = log.path.read_bytes()
    assert "café ✓".encode() in raw
    assert log.read()[1]["where"] == str(tmp_path)
    assert log.read()[1]["when"] == str(NOW)


def test_without_the_variable_loopd_is_lenient(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOOPD_STRICT_EVENTS")
    monkeypatch.setattr(events_module, "_warned", {"no_such_event"})
    log = EventLog(tmp_path / "events.jsonl")
    log.append("no_such_event", NOW)
    assert [e["type"] for e in log.read()] == ["no_such_event"]


def test_iso_is_utc_whatever_the_machines_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        assert iso(NOW) == "2026-11-30T02:00:00.000000Z"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_an_empty_log_is_never_rotated_and_a_full_one_at_its_size(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "a" / "events.jsonl", rotate_bytes=0)
    log.append("tick_error", NOW, error="one")
    assert rotated_numbers(log.path) == []  # it was empty when opened
    size = log.path.stat().st_size
    exact = EventLog(tmp_path / "b" / "events.jsonl", rotate_bytes=size)
    exact.append("tick_error", NOW, error="one")
    exact.append("tick_error", NOW, error="two")  # at exactly rotate_bytes: rotated
    assert rotated_numbers(exact.path) == [1]


def test_repair_keeps_a_first_empty_line_and_leaves_a_fifo_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    log.path.write_bytes(b'\n{"torn": ')
    log.repair()
    assert log.path.read_bytes() == b"\n"
    log.path.unlink()
    os.mkfifo(log.path)
    log.repair()  # never opened: a FIFO's open could wait for ever
    log.append("tick_error", NOW, error="after")
    aside = tmp_path / "events.jsonl.not-a-file"
    assert capsys.readouterr().err == (
        f"loopd: warning: {log.path} was not a regular file (moved to {aside}); loopd "
        "starts a new event log there\n"
    )
    log.path.write_bytes(b'{"a": 1}\nbroken\n{"b": 2}\n')
    assert log.read() == [{"a": 1}, {"b": 2}]
