"""The Temporal home's parts facing hosted repositories: `[listen]`, the remote poller, traces.

The same `Outside` as the local daemon's (daemon/service/outside.py), with the home's
context: the listener (webhooks at /hooks/..., /metrics, /healthz), the remote feed and
poller, the runs' traces. On this engine a delivery's triggers reach the inbox once its
commit is fetched into the loop's repository (the run's tree is made from it later, by an
activity); the home's forwarding sends them to the loops' controllers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from daemon.clock import utc_now
from daemon.people.escalation import open_escalations
from daemon.service.context import Context
from daemon.service.outside import Outside

TICK_EVERY = 1.0  # seconds between the home's heartbeats for /metrics and the desk's flush


def start_outside(ctx: Context, healthy: Callable[[], bool]) -> Outside:
    """Started at the home as locally; ConfigFatal (exit 2) when `[listen]` cannot bind."""

    def gauges() -> dict[str, float]:
        live = ctx.store.live_runs()  # the runs the home started and has not finished
        return {
            "running_runs": len(live),
            "open_escalations": len(open_escalations(ctx.store)),
        }

    return Outside.start(ctx, utc_now(), gauges=gauges, healthy=healthy)


async def tick_outside(outside: Outside) -> None:
    """The home's heartbeat for /metrics; the refusals counted in a minute that is over are
    written (the local daemon does both at each tick)."""
    while True:
        outside.ticked()
        await asyncio.sleep(TICK_EVERY)
