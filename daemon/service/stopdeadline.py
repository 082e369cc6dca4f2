"""The stop deadline: after SIGTERM or SIGINT, this process ends within its shutdown grace.

A run stops in order where it looks at its StopToken (an agent, a check, a wait for the
verifier); a call that hangs elsewhere (a model call that never answers, a git command on
a stuck file, a read of a FIFO) would otherwise keep `loopd once` or `loopd run` alive
until its own timeout, or forever. The deadline does not depend on the main thread: the
signal is seen through the interpreter's wakeup fd, which the C-level handler writes even
while the main thread is blocked, and a thread of its own waits `stop_within(grace)`: the
grace itself, or MIN_STOP when the grace is shorter (a second signal: MIN_STOP from then).
Past it, every process this one started is killed and the process exits with
EXIT_DEADLINE; its run stays as it was, and the next `loopd once` or `loopd run` ends it as
interrupted (as after a crash). A running attempt's agent gets `agent_grace(grace)`: the
grace less what loopd keeps to take the work and write the run's record, so the orderly
stop ends within the grace too.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from daemon.processes import descendants, snapshot

# The shortest stop: what killing the agents, taking their work and writing the records needs
# on a busy machine. A shorter shutdown_grace still gives the agent only its grace.
MIN_STOP = 5.0
RECORD_SHARE = 10.0  # at most this much of the grace is kept for loopd's own ending
EXIT_DEADLINE = 1


def stop_within(grace: float) -> float:
    """Seconds from a stop signal to the process's end, at the latest."""
    return max(grace, MIN_STOP)


def agent_grace(grace: float) -> float:
    """Seconds a running attempt's agent gets after a stop signal (the rest is loopd's)."""
    within = stop_within(grace)
    return max(0.0, min(grace, within - min(RECORD_SHARE, within / 3)))


STOPS = frozenset({signal.SIGTERM, signal.SIGINT})


class StopDeadline:
    """Arms on the first stop signal; `done()` once the orderly stop has ended."""

    def __init__(
        self, grace: Callable[[], float], what: str, on_expiry: Callable[[], str] | None = None
    ) -> None:
        self.grace = grace  # read when the signal arrives: a reload may have changed it
        self.what = what  # "loopd once", "loopd run": named in the last line printed
        self.on_expiry = on_expiry  # a line to print (the run left), before the kill
        self._done = threading.Event()
        self._deadline: float | None = None
        self._changed = threading.Condition()

    def install(self) -> None:
        """Route stop signals to the deadline's thread (after the handlers are installed)."""
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        threading.Thread(target=self._listen, args=(read_end,), daemon=True).start()
        threading.Thread(target=self._wait, daemon=True, name="stop-deadline").start()

    def done(self) -> None:
        """The stop ended in order: no deadline any more."""
        self._done.set()
        with self._changed:
            self._changed.notify_all()

    def arm(self, first: bool) -> None:
        """A stop signal arrived: the deadline is the grace (first) or MIN_STOP from now."""
        deadline = time.monotonic() + (stop_within(max(0.0, self.grace())) if first else MIN_STOP)
        with self._changed:
            if self._deadline is None or deadline < self._deadline:
                self._deadline = deadline
            self._changed.notify_all()

    def _listen(self, fd: int) -> None:
        stops = 0
        while not self._done.is_set():
            try:
                data = os.read(fd, 64)
            except InterruptedError:
                continue
            if not data:
                return
            for number in data:
                if number in STOPS:
                    stops += 1
                    self.arm(first=stops == 1)

    def _wait(self) -> None:
        with self._changed:
            while not self._done.is_set():
                if self._deadline is None:
                    self._changed.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
        if not self._done.is_set():
            self.expire()

    def expire(self) -> None:
        """Kill every process this one started and exit: the stop took too long."""
        line = ""
        if self.on_expiry is not None:
            try:
                line = self.on_expiry()
            except Exception:  # noqa: BLE001 - the exit must happen whatever this says
                line = ""
        message = (
            f"loopd: {self.what} did not stop within shutdown_grace ({self.grace():g}s, at "
            f"least {MIN_STOP:g}s); what it started is killed and it exits now"
        )
        try:
            print(message + (f"; {line}" if line else ""), file=sys.stderr, flush=True)
        except Exception:  # noqa: BLE001 - a closed stderr must not keep the process alive
            pass
        kill_started()
        os._exit(EXIT_DEADLINE)


def kill_started() -> int:
    """SIGKILL every process this one started, and the process groups they lead (agents and
    checks run in groups of their own; this process's own group is spared). How many."""
    own = os.getpgid(0)
    table = snapshot()
    pids = descendants(os.getpid(), table)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    # Only groups one of them leads: never a group of processes this one did not start.
    for group in {table[pid].pgid for pid in pids if pid in table} & pids - {own}:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return len(pids)
