"""glibc's allocator in a long-lived daemon: fewer arenas, and free pages handed back.

Each run has its own thread, and glibc gives threads arenas of their own (up to eight per
core): a few runs at once leave an arena behind that keeps its freed pages, so the daemon's
RSS rose in steps of a few MB whenever more runs than before overlapped, and never fell
(#41's one-life soaks: +3 to +8 MB an hour after the first hour). Two arenas serve a daemon
whose threads mostly wait on subprocesses; `malloc_trim` after runs end returns the pages
freed within them. Elsewhere (musl, macOS) both are no-ops.
"""

from __future__ import annotations

import ctypes
import sys

M_ARENA_MAX = -8  # glibc's malloc.h
ARENAS = 2
TRIM_EVERY = 60.0  # seconds between trims at most: a trim walks every arena's free lists


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    # The C library already loaded, as daemon/processes.py reaches prctl: find_library("c")
    # would run `ldconfig -p` at every daemon start.
    libc = ctypes.CDLL(None, use_errno=True)
    # musl has neither; the daemon runs without them.
    if not hasattr(libc, "mallopt") or not hasattr(libc, "malloc_trim"):
        return None
    return libc


_LIBC = _libc()


def limit_arenas(count: int = ARENAS) -> bool:
    """At most `count` malloc arenas from now on (call before the run threads start)."""
    if _LIBC is None:
        return False
    return bool(_LIBC.mallopt(ctypes.c_int(M_ARENA_MAX), ctypes.c_int(count)))


class Trimmer:
    """Hands freed pages back to the system after runs end, at most every `TRIM_EVERY` s."""

    def __init__(self, every: float = TRIM_EVERY) -> None:
        self.every = every
        self._last: float | None = None

    def after_runs(self, monotonic_now: float) -> bool:
        """Trim if the last trim is older than `every` seconds; whether it trimmed."""
        if _LIBC is None:
            return False
        if self._last is not None and monotonic_now - self._last < self.every:
            return False
        self._last = monotonic_now
        _LIBC.malloc_trim(ctypes.c_size_t(0))
        return True
