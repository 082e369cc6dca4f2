"""`state/events.jsonl`: the append-only audit log, one JSON object a line.

Several processes write it (the daemon, `loopd once`, `pause`, the escalation commands), so
rotation is decided under an flock on the file being rotated: whoever holds it checks that
the path still names the file it opened, renames it once, and the others follow to the new
file. A line is written whole with one `write` on an O_APPEND descriptor.

Each event's type must be a member of `Event` (anything else is a bug in loopd), and its
fields are checked against the type's model on every write, which costs a few microseconds.
An unknown type or a mismatch raises where LOOPD_STRICT_EVENTS is set (the tests set it);
elsewhere it is a warning on stderr, once per type, and the event is written as given: a
field or type named wrongly must not end a run at night.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from daemon.clock import utc_now
from daemon.redact import redact_value
from daemon.state.atomic import FILE_MODE, ensure_dir, fsync_dir
from daemon.state.eventtypes import Event, UnknownEvent, event_type, fields_problem

STRICT_ENV = "LOOPD_STRICT_EVENTS"
_warned: set[str] = set()  # types whose mismatched fields were reported by this process


def iso(ts: datetime) -> str:
    """UTC timestamp as events and records write it."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rotated_numbers(path: Path) -> list[int]:
    """The N of each `STEM-N.jsonl` rotated from the log at `path`."""
    prefix = f"{path.stem}-"
    out = []
    for other in path.parent.glob(f"{prefix}*{path.suffix}"):
        n = other.name[len(prefix) : len(other.name) - len(path.suffix)]
        if n.isdigit():
            out.append(int(n))
    return out


class EventLog:
    """Appends events; rotates past `rotate_bytes`; `repair()` cuts a torn last line."""

    def __init__(self, path: Path, rotate_bytes: int = 64_000_000) -> None:
        self.path = path
        self.rotate_bytes = rotate_bytes
        self._lock = threading.Lock()
        # Called with each event written (the daemon's /metrics counts them); never raise.
        self.observers: list[Callable[[dict[str, Any]], None]] = []
        ensure_dir(path.parent)

    def repair(self) -> None:
        """Cut a last line that a crash left without its newline.

        Only the holder of the home's lock calls this (the daemon, at start): a reader that
        repaired could cut a line another process is writing at that moment.
        """
        if not self.path.exists() or not self._regular():
            return
        with self.path.open("rb+") as fh:
            size = fh.seek(0, os.SEEK_END)
            if size == 0:
                return
            window = min(size, 1 << 20)
            fh.seek(size - window)
            tail = fh.read(window)
            if tail.endswith(b"\n"):
                return
            cut = tail.rfind(b"\n")
            keep = size - window + cut + 1 if cut >= 0 else 0
            fh.truncate(keep)
            fh.flush()
            os.fsync(fh.fileno())

    def _open_current(self) -> int:
        """An fd of the current log, flock-ed, rotated first when it is full."""
        while True:
            # No link followed, no FIFO waited on: either would hang or misdirect every write.
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
            try:
                fd = os.open(self.path, flags | os.O_NONBLOCK, FILE_MODE)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENXIO):
                    raise
                self._set_aside()
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                mine = os.fstat(fd)
                if not stat.S_ISREG(mine.st_mode):
                    os.close(fd)
                    self._set_aside()
                    continue
                try:
                    named = os.stat(self.path)
                except FileNotFoundError:
                    named = None
                if named is None or (named.st_ino, named.st_dev) != (mine.st_ino, mine.st_dev):
                    os.close(fd)  # another process rotated it since we opened it
                    continue
                if mine.st_size == 0 or mine.st_size < self.rotate_bytes:
                    return fd
                os.replace(self.path, self._next_rotated())
                fsync_dir(self.path.parent)
                os.close(fd)  # releases the flock: waiting writers see the rename
            except BaseException:
                try:
                    os.close(fd)
                except OSError:
                    pass
                raise

    def _regular(self) -> bool:
        """Whether the log's path is a regular file (no link), as loopd writes it."""
        try:
            return stat.S_ISREG(os.lstat(self.path).st_mode)
        except FileNotFoundError:
            return False

    def _set_aside(self) -> None:
        """Move what stands at the log's path and is not a file (a FIFO, a link) aside."""
        aside = self.path.with_name(f"{self.path.name}.not-a-file")
        try:
            os.replace(self.path, aside)
        except FileNotFoundError:
            return
        print(
            f"loopd: warning: {self.path} was not a regular file (moved to {aside}); loopd "
            "starts a new event log there",
            file=sys.stderr,
            flush=True,
        )

    def _next_rotated(self) -> Path:
        # Named after this log (events-N.jsonl, worker-events-N.jsonl): a worker's rotated
        # log must never pass for one of the home's.
        # One past the highest: retention deletes the oldest, and N must keep counting up
        # (readers take the highest N for the newest).
        n = max(rotated_numbers(self.path), default=0) + 1
        return self.path.parent / f"{self.path.stem}-{n}{self.path.suffix}"

    def append(
        self,
        type: Event | str,
        now: datetime | None = None,
        loop: str | None = None,
        run: str | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """Write one event line and return it; stamped with the time of writing by default."""
        kind = _known(type)
        if isinstance(kind, Event):
            _check_fields(kind, fields)
        stamp = now if now is not None else utc_now()
        event: dict[str, Any] = {"ts": iso(stamp), "type": str(kind), "loop": loop, "run": run}
        event.update(redact_value(fields))
        line = (json.dumps(event, default=str, ensure_ascii=False) + "\n").encode("utf-8")
        with self._lock:
            fd = self._open_current()
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        for observer in self.observers:
            try:
                observer(event)
            except Exception:  # noqa: BLE001, S110 - counting must never fail a write
                pass
        return event

    def read(self) -> list[dict[str, Any]]:
        """Every event of the current file, oldest first; unparsable lines skipped."""
        out: list[dict[str, Any]] = []
        if not self._regular():
            return out  # never a FIFO's endless wait: the next append sets it aside
        with self.path.open("rb") as fh:
            for raw in fh:
                try:
                    out.append(json.loads(raw))
                except ValueError:
                    continue
        return out


class EventFieldsMismatch(ValueError):
    """An event's fields differ from its type's model (raised only in strict mode)."""


def _strict() -> bool:
    return os.environ.get(STRICT_ENV, "") not in ("", "0")


def _known(type: Event | str) -> Event | str:
    """The type's member of Event. An unknown one is a mistake in loopd: it raises where the
    tests run (strict); at night the line is written as given, with a warning, once."""
    try:
        return event_type(type)
    except UnknownEvent:
        if _strict():
            raise
        if type not in _warned:
            _warned.add(type)
            print(
                f"loopd: warning: unknown event type {type!r} (written as given)", file=sys.stderr
            )
        return str(type)


def _check_fields(kind: Event, fields: dict[str, Any]) -> None:
    strict = _strict()
    try:
        problem = fields_problem(kind, fields)
    except Exception as exc:  # noqa: BLE001 - a broken check must not cost the event either
        if strict:
            raise
        problem = f"event {kind.value}: its model failed: {type(exc).__name__}: {exc}"
    if not problem:
        return
    if strict:
        raise EventFieldsMismatch(problem)
    if kind not in _warned:
        _warned.add(kind)
        print(f"loopd: warning: {problem} (written as given)", file=sys.stderr, flush=True)


class EventTail:
    """Follows the log from the moment it is made, across rotations: new whole lines only."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            st = os.stat(path)
            self._file: tuple[int, int] | None = (st.st_dev, st.st_ino)
            self._offset = st.st_size
        except FileNotFoundError:
            self._file, self._offset = None, 0

    def read(self) -> list[dict[str, Any]]:
        """Events written since the last call, oldest first."""
        out: list[dict[str, Any]] = []
        try:
            st = os.lstat(self.path)
            # A FIFO or a link in the log's place is never read: the next append sets it aside.
            ok = stat.S_ISREG(st.st_mode)
            now: tuple[int, int] | None = (st.st_dev, st.st_ino) if ok else None
        except FileNotFoundError:
            now = None
        if self._file is not None and now != self._file:
            # Rotated: the rest of the file we followed now has an events-N.jsonl name.
            old = self._rotated(self._file)
            if old is not None:
                out += self._read_from(old)
            self._offset = 0
        self._file = now
        if now is not None:
            out += self._read_from(self.path)
        return out

    def _rotated(self, ident: tuple[int, int]) -> Path | None:
        for path in self.path.parent.glob("events-*.jsonl"):
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            if (st.st_dev, st.st_ino) == ident:
                return path
        return None

    def _read_from(self, path: Path) -> list[dict[str, Any]]:
        try:
            with path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1  # a line still being written is read next time
        self._offset += end
        out = []
        for raw in data[:end].splitlines():
            try:
                out.append(json.loads(raw))
            except ValueError:
                continue
        return out
