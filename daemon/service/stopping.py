"""What `loopd run` says while it stops: at once, the runs it waits for (by id), the seconds
of the grace left and that a second Ctrl-C stops at once; again every few seconds while it
waits; and, on a second signal, which runs it kills. The signal handlers only count the
signals (daemon/daemon.py); this is the driver's part, on the main thread.

A second signal interrupts every run with no grace: their agents' and checks' process groups
are killed now, each run writes its record as `interrupted` and leaves its `retry` trigger,
and what cannot end in order is killed by the stop deadline (daemon/service/stopdeadline.py)
within MIN_STOP; a restart ends a run left live as interrupted, as after a crash.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable

from daemon.service.console import say
from daemon.service.context import Flags
from daemon.service.stopdeadline import agent_grace, kill_started, stop_within
from daemon.service.workers import WorkerPool

EVERY = 5.0  # seconds between two "still waiting" lines
AGAIN = "Ctrl-C again stops at once"


def _runs(ids: list[str]) -> str:
    return ("run " if len(ids) == 1 else "runs ") + ", ".join(ids)


class StopWait:
    """The driver's wait for the orderly stop (`stopper`), with its lines."""

    def __init__(
        self,
        pool: WorkerPool,
        flags: Flags,
        grace: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pool = pool
        self.flags = flags
        self.monotonic = monotonic
        self.began = monotonic()
        self.agent_ends = self.began + agent_grace(grace)  # a running agent is killed then
        self.stop_ends = self.began + stop_within(grace)  # the deadline: all is killed then

    def live(self) -> list[str]:
        """The runs still going, by id."""
        return sorted(w.run_id for w in list(self.pool.workers.values()) if w.thread.is_alive())

    def line(self, first: bool) -> str:
        """What the stop waits for now, the seconds left, and how to stop at once."""
        now = self.monotonic()
        live = self.live()
        head = "loopd: stopping: waiting for" if first else "loopd: still waiting for"
        if live:
            left = max(0, round(self.agent_ends - now))
            return (
                f"{head} {_runs(live)} ({left}s of shutdown_grace left for running agents; "
                f"then they are killed and their runs end interrupted); {AGAIN}"
            )
        left = max(0, round(self.stop_ends - now))
        return f"{head} loopd's own records (at most {left}s left); {AGAIN}"

    def wait(self, stopper: threading.Thread, hurry: Callable[[], None]) -> None:
        """Join `stopper`, saying what it waits for; a second signal calls `hurry` once."""
        say([self.line(first=True)])
        next_line = self.began + EVERY
        hurried = False
        while stopper.is_alive():
            stopper.join(timeout=0.2)
            if not stopper.is_alive():
                break
            if self.flags.stops > 1 and not hurried:
                hurried = True
                live = self.live()
                what = f"killing {_runs(live)} now" if live else "no run is live"
                say(
                    [
                        f"loopd: stopping at once: {what}; a run not ended in order is ended "
                        "interrupted by the next start"
                    ]
                )
                hurry()  # no run starts another process, nor waits for its agent
                kill_started()  # what they started dies now, an agent ignoring SIGTERM too
            elif not hurried and self.monotonic() >= next_line:
                say([self.line(first=False)])
                next_line += EVERY


def engine_waiting_line(grace: float) -> str:
    """The Temporal home's and worker's first line after a stop signal."""
    return (
        f"loopd: stopping: waiting for running attempts ({agent_grace(grace):.0f}s of "
        "shutdown_grace left for their agents; then they are killed and their runs end "
        f"interrupted); {AGAIN}"
    )


async def engine_stop_at_once(hurry: asyncio.Event) -> None:
    """The Temporal engine's second stop signal (`hurry`): kill what the attempts started,
    and exit; the next start reaps what they left and ends their runs."""
    await hurry.wait()
    say(["loopd: stopping at once: killing what the running attempts started"])
    kill_started()
    os._exit(1)
