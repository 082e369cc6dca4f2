"""`state/status.toml`: what each loop is doing, rewritten when it changes and at least every
`HEARTBEAT_EVERY` seconds of the monotonic clock (a wall-clock jump neither stops nor floods
the heartbeat; the heartbeat's value is the wall-clock time a person reads)."""

from __future__ import annotations

import os
from datetime import datetime

import daemon as package
from daemon.config import Loop
from daemon.config.errors import ConfigError
from daemon.runs.budget import Hold
from daemon.sandbox.registry import choose
from daemon.scheduling.queue import RunQueue
from daemon.scheduling.timer import CronTimer
from daemon.service.context import Context
from daemon.service.holds import Holds
from daemon.service.verifier import VerifierWatch
from daemon.service.workers import WorkerPool
from daemon.state.records import DaemonStatus, LoopStatus, RunRecord, StatusFile

HEARTBEAT_EVERY = 10.0  # seconds


def add_unloaded_loops(status: StatusFile, errors: list[ConfigError]) -> None:
    """Loop files that failed to load: in status as not loaded, with why."""
    for error in errors:
        if error.file.parent.name == "loops" and error.file.stem not in status.loops:
            status.loops[error.file.stem] = LoopStatus(
                phase="not-loaded", enabled=False, loaded=False, error=str(error)
            )


class StatusWrites:
    """status.toml saved when what it says changed, or when the heartbeat is due (on the
    monotonic clock, so a wall-clock jump neither stops nor floods the writes)."""

    def __init__(self) -> None:
        self._written_at = float("-inf")
        self._body = ""

    def save(self, ctx: Context, status: StatusFile, force: bool = False) -> None:
        body = status.model_dump_json(exclude={"daemon": {"heartbeat"}})
        mono = ctx.monotonic()
        if force or body != self._body or mono - self._written_at >= HEARTBEAT_EVERY:
            ctx.store.save_status(status)
            self._written_at, self._body = mono, body


class StatusBoard:
    """Builds status.toml from the queue, the workers and the timer."""

    def __init__(
        self,
        ctx: Context,
        queue: RunQueue,
        timer: CronTimer,
        pool: WorkerPool,
        started: datetime,
        holds: Holds | None = None,
        verifier: VerifierWatch | None = None,
    ) -> None:
        self.ctx = ctx
        self.holds = holds
        self.verifier = verifier
        self.queue = queue
        self.timer = timer
        self.pool = pool
        self.started = started
        self._writes = StatusWrites()
        self._outcomes = self._newest_outcomes()

    def _newest_outcomes(self) -> dict[str, tuple[str, str]]:
        """The newest finished run of each loop: (run id, outcome)."""
        store = self.ctx.store
        out: dict[str, tuple[str, str]] = {}
        newest = store.last_run_ids()
        for name in self.ctx.loops:
            for run in store.iter_runs(name) if name in newest else ():
                if run.outcome is not None:
                    out[name] = (run.id, run.outcome)
                    break
        return out

    def note_finished(self, run: RunRecord) -> None:
        if run.outcome is not None:
            self._outcomes[run.loop] = (run.id, run.outcome)

    def write(self, now: datetime, force: bool = False) -> None:
        """Rewrite status.toml when something changed, and when the heartbeat is due."""
        ctx = self.ctx
        paused = ctx.store.paused_loops()
        sandbox = choose(ctx.config.daemon.sandbox)  # probed once per process
        loud = [w for w in (sandbox.warning, sandbox.refusal) if w]
        held = self.holds.held(now) if self.holds is not None else {}
        warnings = [*loud, *ctx.restart_pending, *ctx.config.warnings]
        if ctx.config_error:
            warnings.insert(
                0,
                "loopd.toml does not load; the daemon keeps the configuration "
                f"it had: {ctx.config_error}",
            )
        status = StatusFile(
            daemon=DaemonStatus(
                pid=os.getpid(),
                version=package.__version__,
                started=self.started,
                heartbeat=now,
                running=not ctx.flags.stop.is_set(),
                warnings=warnings,
                sandbox=sandbox.summary(),
                engine=ctx.config.daemon.engine.kind,
            ),
            verifier=self.verifier.status() if self.verifier is not None else None,
            budget=self.holds.budget_status() if self.holds is not None else None,
        )
        for name, loop in sorted(ctx.loops.items()):
            status.loops[name] = self._loop_status(name, loop, paused, held)
        add_unloaded_loops(status, ctx.config.errors)
        self._writes.save(ctx, status, force)

    def _loop_status(
        self, name: str, loop: Loop, paused: set[str], held: dict[str, Hold]
    ) -> LoopStatus:
        """One loop's line: its run (a finished one noted), queue, hold or park, and files."""
        ctx = self.ctx
        run = self.pool.run_of(name)
        if run is not None and run.outcome is not None:
            self.note_finished(run)
        pending = self.queue.pending_count(name)
        phase = run.phase if run else ("paused" if name in paused else "idle")
        if not run and pending and name not in paused:
            phase = "queued"
        last_run, last_outcome = self._outcomes.get(name, ("", ""))
        hold = held.get(name)
        waiting_for, resume_at = (hold.why, hold.until) if hold else ("", None)
        if run is not None and run.phase == "waiting" and run.park is not None:
            waiting_for = f"the usage limit of agent profile {run.park.profile!r}"
            resume_at = run.resume_at
        elif hold and phase == "queued":
            phase = "waiting"
        return LoopStatus(
            phase=phase,
            run=run.id if run else "",
            attempt=len(run.attempts) if run else 0,
            last_outcome=last_outcome,
            last_run=last_run,
            next_fire=self.timer.next_fire(name) if loop.config.enabled else None,
            paused=name in paused,
            enabled=loop.config.enabled,
            pending=pending,
            waiting_for=waiting_for,
            resume_at=resume_at,
            stale=name in ctx.files.stale,
            error=ctx.files.stale.get(name, ""),
            digest=ctx.files.digests.get(name, ""),
        )
