"""Run slots: `max_concurrent_runs` counts runs that work, not runs that wait.

A run holds a slot from its start; it gives it back while it is parked on a usage limit or
waits for an unreachable verifier, so one waiting run never holds the machine, and takes one
again before its agent works again. A run taking its slot back goes before new runs: while
one waits for a slot, no new run starts. `loopd once` has no slots (None): every helper
below is a no-op then.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from daemon.runparts.stop import StopToken

POLL = 0.5  # seconds between looks at the stop token while waiting for a slot


class RunSlots:
    """The daemon's slots; `limit` is read at each use, so a reload changes it."""

    def __init__(self, limit: Callable[[], int], on_free: Callable[[], None] = lambda: None):
        self._limit = limit
        self._on_free = on_free  # wakes the daemon: a new run may start
        self._cond = threading.Condition()
        self._holders: set[str] = set()
        self._waiting: set[str] = set()

    def free(self) -> int:
        """Slots a new run may take now (none while a waiting run wants one back)."""
        with self._cond:
            if self._waiting:
                return 0
            return max(0, self._limit() - len(self._holders))

    def holders(self) -> set[str]:
        with self._cond:
            return set(self._holders)

    def add(self, run_id: str) -> None:
        """A run starts (or is resumed after a restart) holding a slot."""
        with self._cond:
            self._holders.add(run_id)

    def release(self, run_id: str) -> None:
        """The run waits (parked, or for the verifier): its slot is free for another run."""
        with self._cond:
            if run_id not in self._holders:
                return
            self._holders.discard(run_id)
            self._cond.notify_all()
        self._on_free()

    def take(self, run_id: str, stop: StopToken, beat: Callable[[], None]) -> None:
        """Wait for a slot and hold it; RunStopped when the run is stopped meanwhile."""
        with self._cond:
            if run_id in self._holders:
                return
            self._waiting.add(run_id)
            try:
                while len(self._holders) >= self._limit():
                    self._cond.release()
                    try:
                        beat()  # waiting for a slot is progress, not a wedged worker
                        stop.raise_if_stopped()
                    finally:
                        self._cond.acquire()
                    self._cond.wait(POLL)
                self._holders.add(run_id)
            finally:
                self._waiting.discard(run_id)

    def forget(self, run_id: str) -> None:
        """The run ended."""
        with self._cond:
            self._holders.discard(run_id)
            self._waiting.discard(run_id)
            self._cond.notify_all()
        self._on_free()


def release_slot(slots: RunSlots | None, run_id: str) -> None:
    if slots is not None:
        slots.release(run_id)


def take_slot(
    slots: RunSlots | None, run_id: str, stop: StopToken, beat: Callable[[], None]
) -> None:
    if slots is not None:
        slots.take(run_id, stop, beat)
