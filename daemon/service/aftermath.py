"""The daemon's side of the aftermath: landed runs followed on their targets from the tick.

Every FOLLOW_EVERY seconds, on a thread of its own (git reads), the landed runs whose target
moved or whose window (1, 7, 30 days after landing, by the tick's `now`) is due are brought up
to date (aftermath/sweep.py). A run past its last window is followed no more; a run that
ended other than succeeded is never read again.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from daemon.aftermath.gitread import Blobs
from daemon.aftermath.identity import follows
from daemon.aftermath.landhold import hold_reverted
from daemon.aftermath.lesson import teach
from daemon.aftermath.sweep import Held, Sweep, sweep
from daemon.calibration.field import field_figures
from daemon.config import Loop
from daemon.git.safe import Git
from daemon.service.context import Context
from daemon.state.aftermath import WINDOWS
from daemon.state.records import RunRecord
from daemon.state.store import UnreadableFile

FOLLOW_EVERY = 300.0  # seconds of the monotonic clock between looks at the targets


def loop_keys(loops: Mapping[str, Loop], name: str) -> tuple[str, str]:
    """A loop's `remote` and agent profile, as the aftermath records them."""
    loop = loops.get(name)
    return (loop.config.remote, loop.config.agent) if loop is not None else ("origin", "")


class Follower:
    """Starts at most one sweep at a time; the tick never waits for it."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._at = float("-inf")
        self._done: set[str] = set()  # runs never to read again
        self._records: Held = {}  # as the last sweep left them
        self._thread: threading.Thread | None = None
        self._gits: dict[str, Git] = {}  # each repository located once
        self._blobs: dict[str, Blobs] = {}  # each repository's cat-file, open across looks
        self._landed: dict[str, RunRecord] = {}  # followed runs, their records read once
        # Runs read and not followed (yet), by their run.toml's stat: the mark alone, never
        # the record (about 18 KB each: a daemon that kept every unlanded success grew by MB
        # an hour, #41); a changed file (landed, ended) is read again.
        self._seen: dict[str, tuple[int, int, int]] = {}
        self._resolved: dict[str, str] = {}  # a run's `repo` as given: the path it resolves to
        self._measured = False  # the judge's field figures written since the start
        self._holds_checked = False  # revert_limit checked over every record since the start
        self._lock = threading.Lock()  # the tick's thread and the remote feed's both start
        # A fetch of a pushed target (a webhook's, a poll's) starts a look at once: on the
        # Temporal home too, whose housekeeping ticks once a minute.
        ctx.follow_moved = lambda: self.tick(ctx.clock())

    def tick(self, now: datetime) -> None:
        """Start a sweep when one is due and none runs (one running looks again, when it
        is done, at the targets seen moving meanwhile)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            mono = self.ctx.monotonic()
            if mono - self._at < FOLLOW_EVERY and not self.ctx.targets_moved:
                return
            only: set[tuple[str, str]] | None = None
            if mono - self._at < FOLLOW_EVERY:
                only = self._take_moved()  # only the runs landed on them, before 5 minutes
            else:
                self._at = mono
                self._take_moved()
            self._thread = threading.Thread(
                target=self._looks, args=(now, only), name="aftermath", daemon=True
            )
            self._thread.start()

    def _take_moved(self) -> set[tuple[str, str]]:
        """The targets marked moved, taken one at a time (another thread may add one)."""
        taken, moved = set(), self.ctx.targets_moved
        while moved:
            try:
                taken.add(moved.pop())
            except KeyError:
                break
        return taken

    def _looks(self, now: datetime, only: set[tuple[str, str]] | None) -> None:
        self.follow(now, only)
        # Targets seen moving while it ran (a tick's start was refused): looked at now. The
        # last check and the end are one step under the lock, so no mark is left behind.
        while True:
            with self._lock:
                if not self.ctx.targets_moved:
                    self._thread = None
                    return
                only = self._take_moved()
            self.follow(self.ctx.clock(), only)

    def join(self, timeout: float | None = None) -> None:
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def close(self) -> None:
        """End the cat-file processes kept open across looks (after `join`)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return  # still looking: they end with loopd
            for blobs in self._blobs.values():
                blobs.close()
            self._blobs.clear()

    def follow(self, now: datetime, only: set[tuple[str, str]] | None = None) -> Sweep:
        """One sweep at `now` over the landed runs still followed (`only`: those landed on
        these (repository, branch) targets)."""
        loops = self.ctx.loops
        runs = self._followed()
        if only is not None:
            runs = [r for r in runs if self._target(r) in only]
        found = sweep(
            self.ctx.store,
            runs,
            now,
            loop_keys=lambda name: loop_keys(loops, name),
            due_only=True,
            cache=self._records,
            gits=self._gits,
            blobs=self._blobs,
            teach=lambda git, run, record: teach(self.ctx.services, git, run, record),
        )
        if not self._holds_checked or any(r.reverts() for r in found.changed):
            # A loop's count of reverts in 7 days grows only with a record that changed
            # (time only lowers it): checked at the first look, then at a new revert.
            limits = {n: (lp.config.land, lp.config.revert_limit) for n, lp in loops.items()}
            hold_reverted(self.ctx.store, limits, found.records, now)
            self._holds_checked = True
        if found.changed or not self._measured:
            thresholds = {n: lp.config.critic_threshold for n, lp in loops.items()}
            field_figures(self.ctx.store, self.ctx.config.daemon, thresholds, now)
            self._measured = True
        last = WINDOWS[-1][0]
        over = {r.run for r in found.records if last in r.windows}
        self._done |= over
        for run_id in over:
            self._records.pop(run_id, None)
            self._landed.pop(run_id, None)
        return found

    def _followed(self) -> list[RunRecord]:
        """The runs followed now. A landed run's record is read once (its landing is final);
        another's again only when its `run.toml` changed (a stat): a look costs no TOML read
        of the thousands of runs it read before (about a millisecond each)."""
        store, out = self.ctx.store, []
        listed = store.run_ids()
        for run_id in listed:
            if run_id in self._done:
                continue
            landed = self._landed.get(run_id)
            if landed is not None:
                out.append(landed)
                continue
            mark = self._mark(run_id)
            if mark is None or self._seen.get(run_id) == mark:
                continue  # gone, or unchanged since it was read and not followed
            try:
                run = store.load_run(run_id)
            except (FileNotFoundError, UnreadableFile):
                continue
            if run.outcome is not None and run.outcome != "succeeded":
                self._done.add(run_id)
                self._seen.pop(run_id, None)
            elif follows(run):
                self._landed[run_id] = run
                self._seen.pop(run_id, None)
                out.append(run)
            else:
                self._seen[run_id] = mark
        if len(self._done) + len(self._landed) + len(self._seen) > len(listed):
            # Runs pruned since: forgotten here too (the three hold distinct runs of `listed`).
            kept = set(listed)
            self._done = {k for k in self._done if k in kept}
            self._landed = {k: v for k, v in self._landed.items() if k in kept}
            self._seen = {k: v for k, v in self._seen.items() if k in kept}
        return out

    def _mark(self, run_id: str) -> tuple[int, int, int] | None:
        """The run's run.toml as a stat sees it (None: not there)."""
        path = os.path.join(self.ctx.store.runs_dir, run_id, "run.toml")
        try:
            st = os.stat(path)
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _target(self, run: RunRecord) -> tuple[str, str]:
        """(its repository resolved, its target branch), the repository resolved once."""
        where = self._resolved.get(run.repo)
        if where is None:
            where = self._resolved[run.repo] = str(Path(run.repo).resolve())
        return where, run.target
