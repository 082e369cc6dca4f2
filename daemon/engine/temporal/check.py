"""`loopd check` on the Temporal engine: do the loops' Schedules fire when their cron says?

Each scheduled loop's Schedules are made on the engine, paused and under throwaway ids, with
the daylight-saving patches `loopd run` would make; the server's matching times for the next
week and around each change of the loop's UTC offset in the coming year are compared with
loopd's own cron. A difference is an error naming the loop file and `schedule`. Without a
reachable engine the mapping is checked offline only (a warning says so).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

from daemon.clock import utc_now
from daemon.config import LoadedConfig
from daemon.config.errors import ConfigError
from daemon.engine.base import EngineError
from daemon.engine.temporal.connect import connect
from daemon.engine.temporal.schedules import (
    HORIZON,
    calendars,
    delete,
    fire_times,
    offset_changes,
    put_loop_schedules,
)
from daemon.home import Home
from daemon.scheduling.cron import Schedule

SHOWN = 3  # differing fire times named in an error


def check_schedules(home: Home, loaded: LoadedConfig) -> tuple[list[ConfigError], list[str]]:
    """Errors (a schedule the engine would fire differently) and warnings (not checked)."""
    scheduled = {n: lp for n, lp in loaded.loops.items() if lp.config.schedule}
    for loop in scheduled.values():
        calendars(loop.config.schedule)  # offline: every expression maps to calendar specs
    if not scheduled:
        return [], []
    try:
        return asyncio.run(_online(home, loaded, scheduled)), []
    except EngineError as exc:
        return [], [f"the schedules' mapping onto the engine was checked offline only: {exc}"]


async def _online(home: Home, loaded: LoadedConfig, scheduled: dict[str, Any]) -> list[ConfigError]:
    engine = loaded.daemon.engine
    client = await connect(engine, home.root, f"check@{uuid.uuid4().hex[:6]}")
    now = utc_now().replace(second=0, microsecond=0)
    errors = []
    for name, loop in sorted(scheduled.items()):
        tag = uuid.uuid4().hex[:8]
        ids = (f"loopd-check/{name}/{tag}", f"loopd-check/{name}/{tag}/dst")
        try:
            made = await put_loop_schedules(
                client,
                name,
                loop.config,
                engine.task_queue,
                now,
                now + HORIZON,
                ids=ids,
                paused=True,
            )
            windows = [(now, now + timedelta(days=7))] + [
                (at - timedelta(days=1), at + timedelta(days=1))
                for at in offset_changes(loop.config.timezone, now, now + HORIZON)
            ]
            cron = Schedule(loop.config.schedule, loop.config.timezone)
            for start, end in windows:
                ours = cron.fires_between(start - timedelta(seconds=1), end)
                theirs = await fire_times(client, name, loop.config, start, end, made)
                if ours != theirs:
                    missing = sorted(set(ours) - set(theirs))[:SHOWN]
                    extra = sorted(set(theirs) - set(ours))[:SHOWN]
                    errors.append(
                        ConfigError(
                            loop.path,
                            "schedule",
                            f"the engine would fire this schedule differently between "
                            f"{start:%Y-%m-%d %H:%M}Z and {end:%Y-%m-%d %H:%M}Z (missing: "
                            f"{[f'{t:%Y-%m-%d %H:%M}Z' for t in missing]}, extra: "
                            f"{[f'{t:%Y-%m-%d %H:%M}Z' for t in extra]})",
                            "report this to loopd's maintainers with the schedule and "
                            'timezone; meanwhile a schedule in timezone = "UTC" avoids it',
                        )
                    )
                    break
        finally:
            for sid in ids:
                await delete(client, sid)
    return errors
