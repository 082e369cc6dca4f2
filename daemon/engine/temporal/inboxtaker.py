"""Which process takes a home's inbox: exactly one, and the home's `loopd run` before a worker.

`loopd run` and `loopd worker` may share a home, and both watch its inbox. Each trigger file
must reach the engine once (one `escalations resolve --retry`, one retry run), so the process
that forwards it holds `state/inbox.lock`. A worker gives the inbox up while the home's own
process runs: only that one can start a loop's controller for a trigger.
"""

from __future__ import annotations

from daemon.state.lock import HomeLock, LockHeld
from daemon.state.store import StateStore

INBOX_LOCK = "inbox.lock"


class InboxTaker:
    """The inbox's lock, taken and kept by the one process that forwards the inbox."""

    def __init__(self, store: StateStore, role: str) -> None:
        self.lock = HomeLock(store.root / INBOX_LOCK)
        self.home_lock = store.lock
        self.role = role
        self.held = False

    def may_take(self) -> bool:
        """Whether this process forwards the inbox now (its lock taken, or kept)."""
        if self.role != "home" and self.home_lock.is_held():
            self.release()  # the home's process runs: it takes the inbox
            return False
        if not self.held:
            try:
                self.lock.acquire()
            except LockHeld:
                return False
            self.held = True
        return True

    def release(self) -> None:
        """Give the inbox up (at a stop, or to the home's process)."""
        if self.held:
            self.lock.release()
            self.held = False
