"""`state/deliveries.log`: webhook deliveries seen in the last 24 h, so a replay is refused.

A service signs a delivery's body, not its delivery id: the same signed body sent again
under a new id is a replay too. So each delivery is remembered twice, by its id and by its
body's sha256: lines `EPOCH_SECONDS KIND:ID` and `EPOCH_SECONDS body:KIND:SHA256`, appended
as each is accepted; a start keeps only the lines younger than `KEEP` and rewrites the file,
so it stays small. Only signed deliveries reach it.
"""

from __future__ import annotations

import os
import threading
from datetime import datetime, timedelta
from pathlib import Path

from daemon.state.atomic import write_atomic

DELIVERIES_NAME = "deliveries.log"
KEEP = timedelta(hours=24)
MAX_ID = 200  # characters of a delivery id kept; longer ones are cut


class Deliveries:
    """Remembers delivery ids for `KEEP`; thread-safe (the listener's requests share it)."""

    def __init__(self, path: Path, now: datetime) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._seen: dict[str, float] = {}
        cutoff = (now - KEEP).timestamp()
        try:
            lines = path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            lines = []
        for line in lines:
            stamp, _, key = line.partition(" ")
            try:
                when = float(stamp)
            except ValueError:
                continue
            if when >= cutoff and key:
                self._seen[key] = when
        write_atomic(path, "".join(f"{t:.3f} {k}\n" for k, t in self._seen.items()))

    def first_time(self, kind: str, delivery: str, now: datetime, digest: str = "") -> bool:
        """Record the delivery; False when its id, or its body's sha256 `digest`, was seen
        within `KEEP` (a replay)."""
        key = f"{kind}:{''.join(c for c in delivery[:MAX_ID] if c.isprintable() and c != ' ')}"
        keys = [key] + ([f"body:{kind}:{digest}"] if digest else [])
        stamp = now.timestamp()
        with self._lock:
            for one in keys:
                seen = self._seen.get(one)
                if seen is not None and stamp - seen < KEEP.total_seconds():
                    return False
            for one in keys:
                self._seen[one] = stamp
            if len(self._seen) > 100_000:  # a flood: forget what has expired
                cutoff = stamp - KEEP.total_seconds()
                self._seen = {k: t for k, t in self._seen.items() if t >= cutoff}
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, "".join(f"{stamp:.3f} {one}\n" for one in keys).encode())
            finally:
                os.close(fd)
        return True
