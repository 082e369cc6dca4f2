"""`loopd logs RUN_ID [--attempt N] [-f] [--json]`: what the agent did, as text a person
reads (or, with --json, its transcript's events as JSON lines)."""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from daemon.cli.common import CommandError, home_of
from daemon.people.transcript_text import Line, parse_line, render_lines
from daemon.service.statecap import EVICTED_MARKER
from daemon.state.pruned import find_pruned
from daemon.state.records import RunRecord
from daemon.state.store import UnreadableFile, read_model
from daemon.state.stored import is_stored, open_stored

POLL = 0.3  # seconds between looks at a followed transcript (each live page of the console is one)


class _Printer:
    """Plain lines when piped; styled (never markup-parsed) lines on a terminal."""

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self._console = None
        if self.tty:
            from rich.console import Console

            self._console = Console(highlight=False, markup=False, emoji=False)

    def lines(self, lines: Iterable[Any]) -> None:
        for line in lines:
            if self._console is not None:
                from rich.text import Text

                self._console.print(Text(line.text, style=line.style or ""), soft_wrap=True)
            else:
                sys.stdout.write(line.text + "\n")
        sys.stdout.flush()

    def note(self, text: str) -> None:
        self.lines([Line(text, "bold")])

    def transcript(self, raw: Iterable[str], full: bool, attempt: int) -> None:
        """Lines of attempt `attempt`'s transcript.jsonl."""
        self.lines(render_lines(raw, full))


class _JsonPrinter(_Printer):
    """`--json`: each transcript event as one JSON line, with its attempt; no headers."""

    def __init__(self) -> None:
        self.tty = False
        self._console = None

    def note(self, text: str) -> None:
        pass

    def transcript(self, raw: Iterable[str], full: bool, attempt: int) -> None:
        for line in raw:
            if line.strip():
                record = {"attempt": attempt, **parse_line(line)}
                # Escaped: an agent's control characters never reach the terminal raw.
                sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()


def _record(store: Any, run_id: str) -> Any:
    """The run's record; None while it is queued (no record yet) or being replaced. On a
    Temporal worker's machine, its own record of the attempts it ran."""
    from daemon.engine.temporal.workerstore import RECORD

    try:
        return store.load_run(run_id)
    except FileNotFoundError:
        pass
    except UnreadableFile:
        return None
    try:
        return read_model(store.run_dir(run_id) / RECORD, RunRecord)
    except (FileNotFoundError, UnreadableFile):
        return None


def _live(store: Any, run_id: str) -> bool:
    """Whether the run is live here: a run of this home, or an attempt this worker runs."""
    from daemon.engine.temporal.workerstore import LIVE

    return run_id in store.live_runs() or (store.root / LIVE / run_id).exists()


def _attempt_ended(store: Any, run_id: str, n: int) -> bool:
    run = _record(store, run_id)
    if run is None:
        # No record: ended only when it is neither queued nor live (cancelled while queued).
        return store.queued_run(run_id) is None and not _live(store, run_id)
    attempt = next((a for a in run.attempts if a.n == n), None)
    if attempt is not None and attempt.finished is not None:
        return True
    return run.outcome is not None or not _live(store, run_id)


class _EndWatch:
    """Whether attempt `n` ended, asked of the run's record only when its file changed or
    AGAIN seconds have passed: a follow looks five times a second, and parsing the record at each
    look was most of a follow's CPU (20 live pages of the console: a tenth of a core)."""

    AGAIN = 5.0  # seconds: the record read anyway (the run's daemon may have died)

    def __init__(self, store: Any, run_id: str, n: int) -> None:
        self.store, self.run_id, self.n = store, run_id, n
        self.path = store.run_dir(run_id) / "run.toml"
        self.seen: tuple[int, int, int] | None = None
        self.at = 0.0

    def ended(self) -> bool:
        try:
            st = os.stat(self.path)
            seen: tuple[int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            seen = None
        now = time.monotonic()
        if seen is not None and seen == self.seen and now - self.at < self.AGAIN:
            return False  # the record as it was at the last look, which said "going on"
        self.seen, self.at = seen, now
        return _attempt_ended(self.store, self.run_id, self.n)


def _header(printer: _Printer, run: Any, n: int) -> None:
    attempt = next((a for a in run.attempts if a.n == n), None) if run else None
    when = f", started {attempt.started:%Y-%m-%d %H:%M:%S}Z" if attempt else ""
    printer.note(f"━━ attempt {n}{when} ━━")


def _missing(path: Path) -> str:
    """Why an attempt has no transcript: evicted under `state_max`, or never written."""

    if (path.parent.parent / EVICTED_MARKER).exists():
        return "(its transcript was deleted to keep state/ under [limits] state_max)"
    return "(no transcript: the agent never started)"


def _print_file(printer: _Printer, path: Path, full: bool, attempt: int) -> None:
    if not is_stored(path):
        printer.note(_missing(path))
        return
    with io.TextIOWrapper(open_stored(path), encoding="utf-8", errors="replace") as fh:
        printer.transcript(fh, full, attempt)


def _transcript_to_follow(printer: _Printer, store: Any, run_id: str, n: int, full: bool) -> bool:
    """Wait for attempt `n`'s plain transcript to follow; False when there is none to follow
    (printed whole when already compressed, or noted when the agent never started)."""
    path = store.run_dir(run_id) / f"attempt-{n}" / "transcript.jsonl"
    if not path.exists() and is_stored(path):  # compressed: its run ended long ago
        _print_file(printer, path, full, n)
        return False
    while not path.exists():
        if is_stored(path):  # ended and compressed between two looks
            _print_file(printer, path, full, n)
            return False
        if _attempt_ended(store, run_id, n) and not path.exists():
            printer.note(f"attempt {n} has no transcript (its agent never started)")
            return False
        time.sleep(POLL)
    return True


def _follow(printer: _Printer, store: Any, run_id: str, n: int, full: bool) -> None:
    """Print attempt `n`'s transcript as it grows, until the attempt ends.

    A transcript replaced by a new file (a rotation) is read from its start; one cut shorter
    in place is read again from its start too.
    """
    path = store.run_dir(run_id) / f"attempt-{n}" / "transcript.jsonl"
    if not _transcript_to_follow(printer, store, run_id, n, full):
        return
    fh = path.open("rb")
    inode = os.fstat(fh.fileno()).st_ino
    pending = b""
    watch = _EndWatch(store, run_id, n)

    def drain() -> None:
        nonlocal pending
        while True:
            chunk = fh.read(1 << 16)
            if not chunk:
                return
            pending += chunk
            *complete, pending = pending.split(b"\n")
            text = [c.decode("utf-8", "replace") for c in complete]
            printer.transcript(text, full, n)

    try:
        while True:
            drain()
            ended = watch.ended()
            try:
                st = os.stat(path)
            except FileNotFoundError:
                st = None
            if st is not None and st.st_ino != inode:
                drain()  # the rest of the old file, then the new one from its start
                fh.close()
                fh = path.open("rb")
                inode = os.fstat(fh.fileno()).st_ino
                pending = b""
                continue
            if st is not None and st.st_size < fh.tell():
                fh.seek(0)
                pending = b""
                continue
            if ended:
                drain()
                if pending.strip():
                    printer.transcript([pending.decode("utf-8", "replace")], full, n)
                printer.note(f"━━ attempt {n} ended ━━")
                return
            time.sleep(POLL)
    finally:
        fh.close()


def logs(args: argparse.Namespace) -> int:
    """The agent's transcript as readable text (tool output folded); -f follows it."""
    home = home_of(args)
    store = home.state()
    run = _record(store, args.run_id)
    queued = store.queued_run(args.run_id) if run is None else None
    if run is None and queued is None and not (store.run_dir(args.run_id) / "run.toml").exists():
        pruned = find_pruned(store.root, args.run_id)
        if pruned is not None:
            raise CommandError(
                f"run {args.run_id} was {pruned.line()}, its transcripts with them; "
                f"`loopd show {args.run_id}` says what it was"
            )
        raise CommandError(f"unknown run {args.run_id!r}; `loopd runs` lists them")
    printer = _JsonPrinter() if args.json else _Printer()
    attempts = [a.n for a in run.attempts] if run else []
    if args.attempt is not None:
        if args.attempt < 1:
            raise CommandError("--attempt counts from 1")
        if args.attempt not in attempts and not (args.follow and run_is_going(store, run)):
            have = ", ".join(map(str, attempts)) or "none yet"
            raise CommandError(
                f"run {args.run_id} has no attempt {args.attempt} (attempts: {have})"
            )
        wanted = [args.attempt]
    else:
        wanted = attempts
    if not args.follow:
        if not wanted:
            state = "queued" if queued else (run.outcome or run.phase if run else "unknown")
            printer.note(f"run {args.run_id} has no attempt yet ({state})")
            return 0
        for n in wanted:
            _header(printer, run, n)
            path = store.run_dir(args.run_id) / f"attempt-{n}" / "transcript.jsonl"
            if is_stored(path):
                _print_file(printer, path, args.full, n)
            else:
                printer.note(_missing(path))
        return 0
    # Follow: earlier attempts as they are, then the current one as it grows.
    if args.attempt is None:
        if not wanted:
            wanted = [1]
            if not run_is_going(store, run) and queued is None:
                printer.note(f"run {args.run_id} ended without an attempt")
                return 0
        for n in wanted[:-1]:
            _header(printer, run, n)
            path = store.run_dir(args.run_id) / f"attempt-{n}" / "transcript.jsonl"
            _print_file(printer, path, args.full, n)
    n = wanted[-1]
    _header(printer, run, n)
    try:
        _follow(printer, store, args.run_id, n, args.full)
    except KeyboardInterrupt:
        return 0
    return 0


def run_is_going(store: Any, run: Any) -> bool:
    """Whether the run may still start attempts (queued, live, no outcome)."""
    if run is None:
        return True
    return run.outcome is None and _live(store, run.id)
