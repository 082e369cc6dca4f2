"""`state/events.jsonl`: the append-only audit log, one JSON object a line."""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from daemon.redact import redact_value
from daemon.state.atomic import FILE_MODE, ensure_dir, fsync_dir


def iso(ts: datetime) -> str:
    """UTC timestamp as events and records write it."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class EventLog:
    """Appends events; rotates past `rotate_bytes`; `repair()` cuts a torn last line."""

    def __init__(self, path: Path, rotate_bytes: int = 64_000_000) -> None:
        self.path = path
        self.rotate_bytes = rotate_bytes
        self._lock = threading.Lock()
        ensure_dir(path.parent)

    def repair(self) -> None:
        """Cut a last line that a crash left without its newline.

        Only the holder of the home's lock calls this (the daemon, at start): a reader that
        repaired could cut a line another process is writing at that moment.
        """
        if not self.path.exists():
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

    def _rotate_if_needed(self) -> None:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size < self.rotate_bytes:
            return
        n = 1
        while (self.path.parent / f"events-{n}.jsonl").exists():
            n += 1
        os.replace(self.path, self.path.parent / f"events-{n}.jsonl")
        fsync_dir(self.path.parent)

    def append(
        self,
        type: str,
        now: datetime,
        loop: str | None = None,
        run: str | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """Write one event line and return it."""
        event: dict[str, Any] = {"ts": iso(now), "type": type, "loop": loop, "run": run}
        event.update(redact_value(fields))
        line = (json.dumps(event, default=str, ensure_ascii=False) + "\n").encode("utf-8")
        with self._lock:
            self._rotate_if_needed()
            fd = os.open(
                self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, FILE_MODE
            )
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        return event

    def read(self) -> list[dict[str, Any]]:
        """Every event of the current file, oldest first; unparsable lines skipped."""
        out = []
        if not self.path.exists():
            return out
        with self.path.open("rb") as fh:
            for raw in fh:
                try:
                    out.append(json.loads(raw))
                except ValueError:
                    continue
        return out
