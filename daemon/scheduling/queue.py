"""The run queue: pending runs per loop under the loop's `overlap` policy, active runs, limits.

A pending run gets its RUN_ID when it is queued (`YYYYMMDDTHHMMSSZ-LOOP-xxxx`, stamped with
the time it was queued), and keeps it when it starts: `loopd cancel RUN_ID` then addresses
a queued run and a running one alike, and `loopd trigger --wait` can name the run it waits
for from the first moment. Every method locks, so any thread may offer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from daemon.config import LoopConfig
from daemon.state.eventtypes import Event
from daemon.state.queuefile import PendingRun
from daemon.state.records import Trigger, make_run_id

__all__ = ["Decision", "PendingRun", "RunQueue"]

Action = Literal["queued", "merged", "skipped", "dropped_queue_full"]
_EVENTS: dict[str, Event] = {
    "queued": Event.TRIGGER,
    "merged": Event.TRIGGER_MERGED,
    "skipped": Event.TRIGGER_SKIPPED,
    "dropped_queue_full": Event.TRIGGER_SKIPPED,
}


@dataclass(frozen=True)
class Decision:
    """What `offer` did with a trigger, for the event the daemon writes."""

    action: Action
    pending_id: str = ""  # the pending run that holds the trigger (queued, merged)
    why: str = ""  # for skipped and dropped triggers, in a few words

    @property
    def event(self) -> Event:
        """The event type: `trigger`, `trigger_merged` or `trigger_skipped`."""
        return _EVENTS[self.action]


class RunQueue:
    """Pending runs per loop, the active run of each loop, and the concurrency limit."""

    def __init__(self, new_id: Callable[[str, datetime, int], str] = make_run_id) -> None:
        self._new_id = new_id
        self._pending: dict[str, list[PendingRun]] = {}
        self._active: dict[str, str] = {}  # loop -> RUN_ID ("" when not known)
        self._order: dict[str, int] = {}  # pending RUN_ID -> arrival number, for fairness
        self._arrivals = 0
        self._lock = threading.Lock()
        self.version = 0  # bumped whenever the pending runs change: the queue file is stale

    # triggers in -------------------------------------------------------------------
    def offer(self, trigger: Trigger, config: LoopConfig, now: datetime) -> Decision:
        """Apply the loop's `overlap` to a trigger: queue it, merge it, or drop it."""
        loop = trigger.loop
        with self._lock:
            pending = self._pending.setdefault(loop, [])
            busy = loop in self._active or bool(pending)
            if trigger.kind == "retry" and trigger.retry_of:
                # A retry continues one run's work on its branch: merged into another run it
                # would start from `base`, skipped it would be lost. It always queues.
                return self._queued(trigger, now)
            if config.overlap == "coalesce" and pending:
                pending[-1].merge(trigger)
                self.version += 1
                return Decision("merged", pending[-1].id)
            if config.overlap == "skip" and busy:
                return Decision("skipped", why="a run of this loop is active or pending")
            if config.overlap == "queue" and len(pending) >= config.max_queued:
                return Decision(
                    "dropped_queue_full", why=f"queue full (max_queued = {config.max_queued})"
                )
            return self._queued(trigger, now)

    def _queued(self, trigger: Trigger, now: datetime) -> Decision:
        """A new pending run for `trigger` (the lock is held)."""
        # A fire handed out ahead is named by its scheduled second, as if taken at it.
        stamp = max(now, trigger.not_before or now)
        run = PendingRun(
            id=self._unique_id(trigger.loop, stamp),
            loop=trigger.loop,
            trigger=trigger,
            queued_at=now,
        )
        self._add(run)
        return Decision("queued", run.id)

    def restore(self, run: PendingRun) -> None:
        """Queue again, as it was, a pending run a stopped daemon had saved."""
        with self._lock:
            if any(p.id == run.id for p in self._pending.get(run.loop, [])):
                return
            self._add(run)

    # runs out ------------------------------------------------------------------------
    def next_ready(
        self, max_concurrent: int | None, paused: Iterable[str] = ()
    ) -> PendingRun | None:
        """Take the pending run that may start now, oldest first; its loop becomes active.

        None when `max_concurrent` runs are active, or every loop with a pending run is
        active or in `paused` (paused loops keep their pending runs). With `max_concurrent`
        None the caller counts what may run (the daemon's run slots).
        """
        blocked = set(paused)
        with self._lock:
            if max_concurrent is not None and len(self._active) >= max_concurrent:
                return None
            heads = [
                runs[0]
                for loop, runs in self._pending.items()
                if runs and loop not in self._active and loop not in blocked
            ]
            if not heads:
                return None
            run = min(heads, key=lambda r: self._order[r.id])
            self._pending[run.loop].pop(0)
            del self._order[run.id]
            self.version += 1
            self._active[run.loop] = run.id
            return run

    def started(self, loop: str, run_id: str = "") -> None:
        """A run of `loop` is active (also one that did not come from the queue)."""
        with self._lock:
            if run_id or loop not in self._active:
                self._active[loop] = run_id

    def finished(self, loop: str) -> None:
        """The active run of `loop` ended: its next pending run may start."""
        with self._lock:
            self._active.pop(loop, None)

    def cancel_pending(
        self, loop: str | None = None, run_id: str | None = None
    ) -> list[PendingRun]:
        """Remove pending runs: the one with `run_id`, or all of `loop`, or all; return them."""
        with self._lock:
            removed: list[PendingRun] = []
            for name, runs in self._pending.items():
                if loop is not None and name != loop:
                    continue
                keep = []
                for run in runs:
                    if run_id is None or run.id == run_id:
                        removed.append(run)
                        del self._order[run.id]
                    else:
                        keep.append(run)
                self._pending[name] = keep
            if removed:
                self.version += 1
            return removed

    # reading -------------------------------------------------------------------------
    def pending(self, loop: str | None = None) -> list[PendingRun]:
        """Pending runs (of one loop, or all), in the order they would start."""
        with self._lock:
            runs = [
                run
                for name, items in self._pending.items()
                if loop is None or name == loop
                for run in items
            ]
            return sorted(runs, key=lambda r: self._order[r.id])

    def pending_count(self, loop: str) -> int:
        """How many runs of `loop` wait."""
        with self._lock:
            return len(self._pending.get(loop, []))

    def active(self, loop: str) -> str | None:
        """The RUN_ID of the loop's active run ("" when not known), None when none runs."""
        with self._lock:
            return self._active.get(loop)

    # internals -----------------------------------------------------------------------
    def _add(self, run: PendingRun) -> None:
        self._pending.setdefault(run.loop, []).append(run)
        self._arrivals += 1
        self._order[run.id] = self._arrivals
        self.version += 1

    def _unique_id(self, loop: str, now: datetime) -> str:
        bump = 0
        while True:
            run_id = self._new_id(loop, now, bump)
            if run_id not in self._order and run_id not in self._active.values():
                return run_id
            bump += 1
