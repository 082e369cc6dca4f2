"""Stopping a run: one token that a cancel, a daemon shutdown and the cancel file all reach.

Whatever the run is doing (an agent session, a check, a wait for the verifier) registers
what stops it with `on_stop`, or waits with `wait`, which returns as soon as the run stops.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Literal

StopWhy = Literal["cancelled", "interrupted"]
# Called with (grace seconds, reason): 0 for a cancel, the shutdown grace for a stop.
StopCallback = Callable[[float, str], None]
CANCEL_POLL = 0.3  # seconds between looks at the cancel file
FINAL_STEP = 0.2  # `wait_until`'s last step: shorter than CANCEL_POLL, one wait to the moment


def wait_until(
    moment: datetime,
    clock: Callable[[], datetime],
    wait: Callable[[float], bool],
    longest: float,
) -> float:
    """Wait (with `wait`, True when stopped) until `clock` reads `moment`, at most `longest`
    seconds in all: a scheduled agent starts at its second, never before it, and a wall
    clock set back never holds it longer. The seconds waited (a stop's step counted whole)."""
    waited = 0.0
    while waited < longest:
        left = (moment - clock()).total_seconds()
        if left <= 0:
            break
        # A long wait wakes short of the moment (its polling steps add up late on a busy
        # machine), then one short step to the moment itself.
        step = min(left - FINAL_STEP if left > 2 * FINAL_STEP else left, longest - waited)
        waited += step
        if wait(step):
            break
    return waited


class RunStopped(Exception):
    """The run was cancelled, or the process running it is stopping."""

    def __init__(self, why: StopWhy) -> None:
        super().__init__(why)
        self.why: StopWhy = why


class StopToken:
    """Cancel (outcome `cancelled`) or interrupt (shutdown, with a grace) one run."""

    def __init__(
        self, cancel_requested: Callable[[], bool] | None = None, poll: float = CANCEL_POLL
    ) -> None:
        self._cancel_requested = cancel_requested
        self._poll = poll
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._why: StopWhy | None = None
        self._grace = 0.0
        self._callbacks: dict[int, StopCallback] = {}
        self._next = 0
        self._closed = threading.Event()
        self._watcher: threading.Thread | None = None
        self._ends_at = 0.0  # time.monotonic() when an interrupt's grace is over
        self._finishing: list[StopToken] = []

    # stopping ---------------------------------------------------------------------------
    def cancel(self) -> None:
        """Stop now; the run's outcome is `cancelled` (a cancel wins over an interrupt)."""
        self._stop("cancelled", 0.0)

    def interrupt(self, grace: float) -> None:
        """Shutdown: what runs may finish within `grace` seconds."""
        self._stop("interrupted", grace)

    def _stop(self, why: StopWhy, grace: float) -> None:
        with self._lock:
            if self._why == "cancelled" or (self._why == why and grace >= self._grace):
                return
            self._why, self._grace = why, grace
            self._ends_at = time.monotonic() + grace
            callbacks = list(self._callbacks.values())
            finishing = list(self._finishing)
        self._stopped.set()
        for token in finishing:
            token._follow(why, grace)
        reason = "cancelled" if why == "cancelled" else "shutdown"
        for callback in callbacks:
            callback(grace, reason)

    def finishing(self) -> StopToken:
        """A token for finishing an attempt whose agent ended by itself while this one was
        being interrupted (its checks, its verdict): stopped when this one is cancelled, and
        interrupted once this one's grace is over, when the agent would have been killed.
        Before any stop it follows this token as it is."""
        token = StopToken(self._cancel_requested, self._poll)
        with self._lock:
            self._finishing.append(token)
            why, left = self._why, max(0.0, self._ends_at - time.monotonic())
        if why is not None:
            token._follow(why, left)
        return token

    def _follow(self, why: StopWhy, grace: float) -> None:
        """Stop as the token this one finishes for did: at once on a cancel, else once the
        grace is over."""
        if why == "cancelled" or grace <= 0:
            self._stop(why, 0.0)
            return
        timer = threading.Timer(grace, self._stop, args=(why, 0.0))
        timer.daemon = True
        timer.start()

    # asking -----------------------------------------------------------------------------
    def _look(self) -> None:
        if self._why != "cancelled" and self._cancel_requested and self._cancel_requested():
            self.cancel()

    @property
    def why(self) -> StopWhy | None:
        """`cancelled`, `interrupted`, or None while the run may go on."""
        self._look()
        return self._why

    @property
    def stopped(self) -> bool:
        return self.why is not None

    @property
    def grace_over(self) -> bool:
        """Stopped, and its grace is over: what ends now was killed, not done in time (a
        second stop signal kills every process a run started at once)."""
        with self._lock:
            return self._why is not None and time.monotonic() >= self._ends_at

    @property
    def cancelled(self) -> bool:
        return self.why == "cancelled"

    def raise_if_stopped(self) -> None:
        """Raise RunStopped when the run was cancelled or interrupted."""
        why = self.why
        if why is not None:
            raise RunStopped(why)

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`; True (early) as soon as the run is stopped."""
        remaining = max(0.0, seconds)
        while True:
            if self.stopped:
                return True
            step = min(remaining, self._poll) if self._cancel_requested else remaining
            if self._stopped.wait(step):
                return True
            remaining -= step
            if remaining <= 0:
                return self.stopped

    @contextmanager
    def on_stop(self, callback: StopCallback) -> Iterator[None]:
        """Call `callback(grace, reason)` if the run stops while inside the block (or did)."""
        with self._lock:
            key = self._next
            self._next += 1
            self._callbacks[key] = callback
            why, grace = self._why, self._grace
        if why is not None:
            callback(grace, "cancelled" if why == "cancelled" else "shutdown")
        try:
            yield
        finally:
            with self._lock:
                self._callbacks.pop(key, None)

    # the cancel file --------------------------------------------------------------------
    def watch(self) -> None:
        """Look at the cancel file in a thread until `close()`, so a cancel reaches the run."""
        if self._cancel_requested is None or self._watcher is not None:
            return
        self._watcher = threading.Thread(target=self._watch, name="cancel-watch", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        while not self._closed.wait(self._poll):
            self._look()

    def close(self) -> None:
        """Stop watching the cancel file."""
        self._closed.set()
