"""The live log: a run's transcript as `loopd logs -f RUN` prints it, read by that command's own
function (run in the console's process, its output cut into redacted lines as it comes), one
attempt after another until the run ends. Nothing here reads state/ itself."""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Callable
from typing import Any

from daemon.redact import redact
from daemon.web import pages
from daemon.web.commands import run_command, run_into

# The header `loopd logs` prints before each attempt's lines: which attempts were shown.
ATTEMPT_HEADER = re.compile(r"^━━ attempt (\d+)")
BETWEEN = 1.0  # seconds between looks at a run that is between two attempts (judging, nudging)
LOADED_LINES = 2000  # the run page shows the transcript's last lines; the stream sends them all


class ClientGone(Exception):
    """The page that followed the log was closed: the follow stops at its next line or look."""


class LineSink(io.TextIOBase):
    """Where the followed command prints: each batch it flushes, redacted as a whole (a secret
    split over lines is still found) and handed on as lines; the attempts whose header it saw."""

    def __init__(self, emit: Callable[[list[str]], None], gone: threading.Event) -> None:
        self.emit, self.gone = emit, gone
        self.pending = ""
        self.seen: set[int] = set()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self.gone.is_set():
            raise ClientGone
        self.pending += text
        return len(text)

    def flush(self) -> None:
        if self.gone.is_set():
            raise ClientGone
        if "\n" not in self.pending:
            return
        batch, self.pending = self.pending.rsplit("\n", 1)
        # A carriage return would end an event's line early in the stream: never sent raw.
        lines = redact(batch).replace("\r", "").split("\n")
        for line in lines:
            header = ATTEMPT_HEADER.match(line)
            if header:
                self.seen.add(int(header.group(1)))
        self.emit(lines)


def _state(home: str, run_id: str) -> Any:
    """`loopd show RUN --json`, or None when there is no record to show (queued, cancelled
    while queued, pruned)."""
    try:
        return pages.run(home, run_id)
    except pages.CommandFailed:
        return None


def ended(data: Any) -> str:
    """What a run's `show --json` says of its end: '' while it may still start attempts."""
    if data is None:
        return "the run has no record to follow"
    if data.get("outcome"):
        return f"run ended: {data['outcome']}"
    if data.get("phase") == "waiting":
        return "the run waits for a person: `loopd escalations` says what it asks"
    return ""


def follow(home: str, run_id: str, sink: LineSink, gone: threading.Event) -> str:
    """`loopd logs -f RUN` into `sink`, then each attempt that starts after it, until the run
    ends; what its end says. ClientGone when the page went away first."""
    argv = ["logs", run_id, "-f"]
    while True:
        outcome = run_into(home, argv, sink)
        sink.write("\n" if sink.pending else "")
        sink.flush()
        if not outcome.ok:
            return outcome.text()
        while True:
            data = _state(home, run_id)
            said = ended(data)
            if said:
                return said
            newer = sorted(a["n"] for a in data.get("attempts", []) if a["n"] not in sink.seen)
            if newer:
                argv = ["logs", run_id, "-f", "--attempt", str(newer[0])]
                break
            if gone.wait(BETWEEN):
                raise ClientGone


def run_with_log(home: str, run_id: str) -> Any:
    """The run page's data: `loopd show RUN --json` and, beside its keys, the transcript as
    `loopd logs RUN` prints it now (read after the record, so an ended run's log is whole) and
    whether the page follows it live."""
    data = pages.run(home, run_id)
    printed = run_command(home, ["logs", run_id])
    lines = printed.text().splitlines() if printed.ok else []
    if len(lines) > LOADED_LINES:
        left = len(lines) - LOADED_LINES
        lines = [f"({left} earlier lines: `loopd logs {run_id}` prints them all)"]
        lines += printed.text().splitlines()[-LOADED_LINES:]
    log = "\n".join(lines)
    return {**data, "console_log": log, "console_live": not ended(data)}
