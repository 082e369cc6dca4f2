"""Whether `state/` has room: a write that failed for want of space marks it full, and a
probe (a small file written, synced and removed) says when space has returned.

The daemon never dies of a full disk: what it cannot record it refuses (a webhook answers
503, so the sender retries), its tick waits, and one notification tells the person. This
module only knows the fact and its probe; daemon/service/floor.py acts on it.
"""

from __future__ import annotations

import errno
import os
import threading
from datetime import datetime
from pathlib import Path

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
PROBE_NAME = ".space-probe"
PROBE_BYTES = 256 * 1024  # room for a run's record, its events and a trigger or two


def no_space(exc: BaseException) -> bool:
    """An OSError of a full disk or an exhausted quota, or one caused by it."""
    seen: BaseException | None = exc
    for _ in range(8):  # wrapped errors: the cause's cause
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno in NO_SPACE:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class StateSpace:
    """`state/`'s room: full since when, for what; thread-safe (the listener writes too)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.full_since: datetime | None = None
        self.what = ""  # the first write that failed
        self.refused = 0  # what was refused for it since
        self._lock = threading.Lock()

    @property
    def full(self) -> bool:
        return self.full_since is not None

    def hit(self, now: datetime, what: str) -> bool:
        """A write failed for want of space; True when this is the first since there was room."""
        with self._lock:
            self.refused += 1
            if self.full_since is not None:
                return False
            self.full_since, self.what = now, what
            return True

    def probe(self) -> bool:
        """Whether PROBE_BYTES fit in `state/` now (written, synced, removed)."""
        path = self.root / PROBE_NAME
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                if os.write(fd, b"\0" * PROBE_BYTES) < PROBE_BYTES:
                    return False  # a short write: the disk filled on the way
                os.fsync(fd)
            finally:
                os.close(fd)
            return True
        except OSError:
            return False
        finally:
            try:
                path.unlink()
            except OSError:
                pass

    def cleared(self) -> tuple[datetime, str, int] | None:
        """Mark `state/` as having room again: (since, what, refused) of the spell, or None."""
        with self._lock:
            if self.full_since is None:
                return None
            spell = (self.full_since, self.what, self.refused)
            self.full_since, self.what, self.refused = None, "", 0
            return spell
