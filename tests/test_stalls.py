"""The stall watcher: silence with the lazy file scan, and a tool call repeated."""

from __future__ import annotations

import os
import time
from pathlib import Path

from daemon.agents.lines import MAX_LINE, LineSplitter
from daemon.agents.stalls import StallWatcher, newest_change

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"


def test_the_third_same_call_in_a_row_stalls_and_what_it_reports_is_kept(tmp_path: Path) -> None:
    watcher = StallWatcher(tmp_path, 60, repeat_limit=3)
    arguments = f'{{"command": "echo {AWS_KEY}"}}'
    watcher.tool_call("shell", arguments)
    watcher.tool_call("shell", '{"command": "ls"}')  # a different call starts the count anew
    for _ in range(3):
        watcher.tool_call("shell", arguments)
    assert watcher.pending == "repeated_tool_call"
    watcher.tool_call("read_file", '{"path": "secret"}')  # arrives before the stall is acted on
    details = watcher.details("repeated_tool_call")
    assert details["tool"] == "shell" and details["times"] == 3
    assert AWS_KEY not in details["arguments"] and "REDACTED" in details["arguments"]


def test_silence_is_a_stall_unless_a_file_changed(tmp_path: Path) -> None:
    watcher = StallWatcher(tmp_path, 10, repeat_limit=3)
    start = watcher.last_activity
    assert watcher.deadline() == start + 10
    assert not watcher.silent(start + 5)  # not yet: no scan either
    (tmp_path / "new.txt").write_text("work")
    assert not watcher.silent(start + 10)  # a file changed: the activity moves to it
    assert watcher.deadline() > start
    old = time.time() - 3600
    os.utime(tmp_path / "new.txt", (old, old))
    watcher.last_activity_wall = time.time()
    assert watcher.silent(watcher.last_activity + 10)
    assert watcher.details("silence")["kind"] == "silence"


def test_no_stall_after_means_no_silence_stall(tmp_path: Path) -> None:
    watcher = StallWatcher(tmp_path, 0, repeat_limit=3)
    assert watcher.deadline() is None and not watcher.silent(time.monotonic() + 1e6)


def test_newest_change_skips_git(tmp_path: Path) -> None:
    since = time.time() - 1
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "index").write_text("x")
    os.utime(tmp_path, (since - 10, since - 10))
    assert newest_change(tmp_path, since) is None
    (tmp_path / "a.py").write_text("x")
    assert newest_change(tmp_path, since) is not None


def test_line_splitter_cuts_long_lines_on_character_boundaries() -> None:
    splitter = LineSplitter("stdout")
    assert splitter.feed(b"one\ntw") == [b"one"]
    assert splitter.feed(b"o\n") == [b"two"]
    long = "é".encode() * MAX_LINE  # 2 bytes a character
    pieces = splitter.feed(long + b"\n")
    assert b"".join(pieces) == long and all(len(p) <= MAX_LINE for p in pieces)
    assert all(p.decode("utf-8") for p in pieces)  # no character split
    assert splitter.feed(b"tail") == [] and splitter.finish() == [b"tail"]
