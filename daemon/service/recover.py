"""At start: what a dead loopd left live. Judging resumes; a run mid-attempt was interrupted
and is retried once. One broken run is recorded (`run_recovery_failed`) and the others go on."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from daemon.config import Loop
from daemon.runs.recovery import recover_run
from daemon.service.context import Context
from daemon.state.eventtypes import Event
from daemon.state.records import RunRecord, Trigger
from daemon.state.runids import loop_of


def recover_live_runs(
    ctx: Context,
    now: datetime,
    resume: Callable[[Loop, RunRecord], None],
    offer: Callable[[Trigger, datetime], None],
) -> None:
    """Decide each live run with `recover_run`; launch (`resume`) or retry (`offer`) it."""
    for run_id in ctx.store.live_runs():
        try:
            recovery = recover_run(ctx.services, ctx.loops, run_id, now)
            if recovery.action == "resume" and recovery.run is not None:
                resume(ctx.loops[recovery.run.loop], recovery.run)
            elif recovery.action == "retry" and recovery.retry_trigger is not None:
                offer(recovery.retry_trigger, now)
        except Exception as exc:  # noqa: BLE001 - one broken run must not stop the daemon
            loop = loop_of(run_id) or None
            error = f"{type(exc).__name__}: {exc}"[:1000]
            ctx.event(Event.RUN_RECOVERY_FAILED, loop=loop, run=run_id, error=error)
