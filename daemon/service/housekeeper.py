"""Chores off the tick's thread: pruning old runs and retiring stale rules (at start, then
daily), retrying lessons deferred while the verifier was down, and `state_max` (hourly with
the tidying, and at once when the estimate of what `state/` grew since its last measure,
checked every CAP_CHECK_EVERY seconds, says it is over); and, on a thread of its own, landed
runs followed on their targets (service/aftermath.py)."""

from __future__ import annotations

import threading
from datetime import datetime

from daemon.housekeeping import prune
from daemon.rules.promotion import retire_stale
from daemon.runs.learning import retry_deferred_lessons, rule_library
from daemon.service.aftermath import Follower
from daemon.service.context import Context
from daemon.service.indexrefresh import refresh_apart
from daemon.service.statecap import Growth
from daemon.service.tidy import cap_state
from daemon.service.tidy import tidy as tidy_up
from daemon.state.eventtypes import Event

PRUNE_EVERY = 86400.0  # seconds of the monotonic clock
LESSONS_EVERY = 300.0
TIDY_EVERY = 3600.0  # landed branches, repository maintenance, rotated event files
CAP_CHECK_EVERY = 10.0  # the estimate of state/'s growth: a stat per event file, live runs


class Housekeeper:
    """Starts at most one chores thread at a time; the tick never waits for it."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._pruned_at = float("-inf")
        self._lessons_at = float("-inf")
        self._tidied_at = float("-inf")
        self._capped_at = float("-inf")
        self.growth = Growth()
        self._thread: threading.Thread | None = None
        self.aftermath = Follower(ctx)  # landed runs followed on their targets, a thread apart

    def tick(self, now: datetime, keep: set[str]) -> None:
        """Start the chores that are due, unless the previous ones still run."""
        self.aftermath.tick(now)
        if self._thread is not None and self._thread.is_alive():
            return
        mono = self.ctx.monotonic()
        prune = mono - self._pruned_at >= PRUNE_EVERY
        lessons = mono - self._lessons_at >= LESSONS_EVERY
        tidy = mono - self._tidied_at >= TIDY_EVERY
        cap = not tidy and self._over(mono)
        if not (prune or lessons or tidy or cap):
            return
        if prune:
            self._pruned_at = mono
        if lessons:
            self._lessons_at = mono
        if tidy:
            self._tidied_at = mono

        def chores() -> None:
            # In its own thread: a first prune of thousands of runs takes many seconds, and
            # lessons wait on the model; the tick keeps taking triggers and signals meanwhile.
            if prune:
                self.prune(now, keep)
            if tidy:
                tidy_up(self.ctx, now, keep, self.growth)
                self.refresh_run_index(now)
            elif cap:
                self.cap(now, keep)
            if lessons:
                self.retry_deferred_lessons()

        self._thread = threading.Thread(target=chores, name="housekeeping", daemon=True)
        self._thread.start()

    def _over(self, mono: float) -> bool:
        """Whether `state/` has grown past `state_max` since its last measure (estimated at
        most every CAP_CHECK_EVERY seconds)."""
        if mono - self._capped_at < CAP_CHECK_EVERY:
            return False
        self._capped_at = mono
        store = self.ctx.store
        try:
            limit = self.ctx.config.daemon.limits.state_limit(store.root)
            return self.growth.estimate(store) > limit
        except OSError:
            return False  # the hourly measure still comes

    def cap(self, now: datetime, keep: set[str]) -> None:
        """`state_max` now: `state/` grew past it since the last measure."""
        try:
            cap_state(self.ctx, now, keep, self.growth)
        except OSError as exc:
            self.ctx.event(Event.STATE_CAP_FAILED, error=str(exc)[:500])

    def prune(self, now: datetime, keep: set[str]) -> None:
        """`retain_days`: prune old runs, then retire rules that stopped earning their place."""
        ctx = self.ctx
        repos = {name: loop.config.repo_path for name, loop in ctx.loops.items()}
        retain_days = ctx.config.daemon.limits.retain_days
        try:
            prune(ctx.store, repos, retain_days, now, keep=keep, rules_dir=ctx.home.rules_dir)
        except Exception as exc:  # noqa: BLE001 - housekeeping never stops the daemon
            ctx.event(Event.PRUNE_FAILED, error=str(exc)[:500])
        try:
            retire_stale(
                rule_library(ctx.services), ctx.store.events, now, state_root=ctx.store.root
            )
        except Exception as exc:  # noqa: BLE001 - housekeeping never stops the daemon
            ctx.event(Event.RETIRE_FAILED, error=str(exc)[:500])

    def refresh_run_index(self, now: datetime) -> None:
        """The run index (state/runs-index.json) kept current for `loopd branches`: each
        run's record, then each branch's +/- lines (a listing counts only what is new since
        the last one, so a person's `loopd branches` after a busy night answers at once).
        In a child process: the parsing leaves the daemon's heap a step larger each hour."""
        repos = {name: loop.config.repo_path for name, loop in self.ctx.loops.items()}
        refresh_apart(self.ctx.store, repos, now)  # a cache: its readers rebuild what is stale

    def retry_deferred_lessons(self) -> None:
        """Post-mortems deferred while the verifier was down (`rule_deferred`), tried again."""
        try:
            retry_deferred_lessons(self.ctx.services)
        except Exception as exc:  # noqa: BLE001 - housekeeping never stops the daemon
            self.ctx.event(Event.DEFERRED_LESSONS_FAILED, error=str(exc)[:500])

    def join(self, timeout: float) -> None:
        self.aftermath.join(timeout=timeout)
        self.aftermath.close()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
