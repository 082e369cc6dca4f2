"""`state/deliveries.log`: webhook deliveries seen in the last 24 h, so a replay is refused.

A service signs a delivery's body, not its delivery id: the same signed body sent again
under a new id is a replay too. So each delivery is remembered twice, by its id and by its
body's sha256: lines `EPOCH_SECONDS KIND:ID` and `EPOCH_SECONDS body:KIND:SHA256`. They are
appended once what the delivery led to (its triggers, or the event that ignores it) is
written: a delivery that could not be recorded (a full disk) is forgotten, and the sender's
retry is taken. A start keeps only the lines younger than `KEEP` and rewrites the file, so
it stays small. Only signed deliveries reach it.
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

    def claim(self, kind: str, delivery: str, now: datetime, digest: str = "") -> list[str]:
        """Hold the delivery's keys in memory (a concurrent copy is a replay); [] when its id,
        or its body's sha256 `digest`, was seen within `KEEP`. Nothing is written: `keep`
        writes the keys once what the delivery led to is recorded, `release` forgets them
        when it could not be (the sender's retry must be taken)."""
        key = f"{kind}:{''.join(c for c in delivery[:MAX_ID] if c.isprintable() and c != ' ')}"
        keys = [key] + ([f"body:{kind}:{digest}"] if digest else [])
        stamp = now.timestamp()
        with self._lock:
            for one in keys:
                seen = self._seen.get(one)
                if seen is not None and stamp - seen < KEEP.total_seconds():
                    return []
            for one in keys:
                self._seen[one] = stamp
            if len(self._seen) > 100_000:  # a flood: forget what has expired
                cutoff = stamp - KEEP.total_seconds()
                self._seen = {k: t for k, t in self._seen.items() if t >= cutoff}
        return keys

    def keep(self, keys: list[str]) -> None:
        """Append the claimed keys to the file: the delivery is taken for good (an OSError
        leaves them in memory only: a replay is refused until the daemon restarts)."""
        with self._lock:
            lines = "".join(f"{self._seen.get(k, 0.0):.3f} {k}\n" for k in keys)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, lines.encode())
            finally:
                os.close(fd)

    def release(self, keys: list[str]) -> None:
        """Forget claimed keys: what the delivery led to was not recorded."""
        with self._lock:
            for one in keys:
                self._seen.pop(one, None)

    def first_time(self, kind: str, delivery: str, now: datetime, digest: str = "") -> bool:
        """Claim and keep at once; False for a replay (see `claim`)."""
        keys = self.claim(kind, delivery, now, digest)
        if keys:
            self.keep(keys)
        return bool(keys)
