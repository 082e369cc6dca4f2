"""A retry that cannot run (its loop disabled or no longer loaded): the run it retries says
why (`retry_not_run` in its run.toml), an event records it, and the person is notified,
since the partial work on that run's branch will not be continued unless someone acts."""

from __future__ import annotations

from daemon.service.context import Context
from daemon.state.eventtypes import Event
from daemon.state.records import Trigger
from daemon.state.store import UnreadableFile


def retry_not_run(ctx: Context, trigger: Trigger, why: str) -> None:
    """Record on `trigger.retry_of` why its retry did not run, and tell the person."""
    store = ctx.store
    run_id = trigger.retry_of
    try:
        run = store.load_run(run_id)
    except (FileNotFoundError, UnreadableFile):
        run = None
    if run is not None:
        run.retry_not_run = why
        store.save_run(run)
    ctx.event(Event.RETRY_NOT_RUN, loop=trigger.loop, run=run_id, why=why)
    notifications = ctx.services.notifications
    if notifications is not None:
        notifications.retry_not_run(trigger.loop, run_id, why, ctx.clock())
