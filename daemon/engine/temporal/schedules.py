"""A loop's `schedule` as Temporal Schedules that fire exactly when loopd's own cron does.

Each cron expression becomes calendar specs with explicit values (a cron with both day
fields restricted becomes two: Temporal requires both fields to match, cron either). Around
daylight-saving changes Temporal and loopd's cron differ (a wall time in the spring gap, a
repeated hour in autumn), so the loop's schedule `loopd/LOOP` skips the wall times where
Temporal would fire and loopd's cron would not, and a second schedule `loopd/LOOP/dst`, in
UTC, holds the instants loopd's cron fires and Temporal would not. Both start the Fire
workflow, which only signals the loop's controller (overlap ALLOW_ALL: the controller applies
the loop's own `overlap`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from daemon.config import LoopConfig
from daemon.engine.temporal.names import dst_schedule_id, fire_id, schedule_id
from daemon.scheduling.cron import CronExpression, Schedule

if TYPE_CHECKING:
    from temporalio.client import Client, ScheduleCalendarSpec, ScheduleSpec

HORIZON = timedelta(days=400)  # daylight-saving changes patched ahead of now
CATCH_UP_MARGIN = timedelta(minutes=1)  # the server keeps a missed fire a little longer
WINDOW = timedelta(hours=6)  # compared around each change of UTC offset
NOTE = "loopd loop {loop}: {spec}"


def _ranges(values: Sequence[int]) -> list[Any]:
    """Sorted values as the fewest ScheduleRanges (runs of consecutive values)."""
    from temporalio.client import ScheduleRange

    out: list[Any] = []
    ordered = sorted(set(values))
    if not ordered:
        return out
    start = prev = ordered[0]
    for value in ordered[1:]:
        if value == prev + 1:
            prev = value
        else:
            out.append(ScheduleRange(start, prev))
            start = prev = value
    out.append(ScheduleRange(start, prev))
    return out


def calendars(expressions: Iterable[str]) -> list[ScheduleCalendarSpec]:
    """The calendar specs of cron expressions, with cron's meaning of the two day fields."""
    from temporalio.client import ScheduleCalendarSpec

    out: list[ScheduleCalendarSpec] = []
    for text in expressions:
        cron = CronExpression.parse(text)
        common: dict[str, Any] = {
            "second": _ranges([0]),
            "minute": _ranges(cron.minute),
            "hour": _ranges(cron.hour),
            "month": _ranges(cron.month),
            "comment": text,
        }
        every_day, every_weekday = _ranges(range(1, 32)), _ranges(range(7))
        if cron.day_restricted and cron.dow_restricted:
            # Either day field matches: one spec per field, the other left open.
            out.append(
                ScheduleCalendarSpec(
                    day_of_month=_ranges(cron.day), day_of_week=every_weekday, **common
                )
            )
            out.append(
                ScheduleCalendarSpec(
                    day_of_month=every_day, day_of_week=_ranges(cron.dow), **common
                )
            )
        else:
            out.append(
                ScheduleCalendarSpec(
                    day_of_month=_ranges(cron.day), day_of_week=_ranges(cron.dow), **common
                )
            )
    return out


def _instant(at: datetime, zone: str) -> ScheduleCalendarSpec:
    """A calendar matching one wall time (year included) in `zone`."""
    from temporalio.client import ScheduleCalendarSpec, ScheduleRange

    wall = at.astimezone(ZoneInfo(zone))
    return ScheduleCalendarSpec(
        year=[ScheduleRange(wall.year)],
        month=[ScheduleRange(wall.month)],
        day_of_month=[ScheduleRange(wall.day)],
        day_of_week=[ScheduleRange(0, 6)],
        hour=[ScheduleRange(wall.hour)],
        minute=[ScheduleRange(wall.minute)],
        second=[ScheduleRange(wall.second)],
    )


def offset_changes(zone: str, start: datetime, end: datetime) -> list[datetime]:
    """The instants in [start, end) after which the zone's UTC offset differs (hour steps)."""
    tz = ZoneInfo(zone)
    out = []
    at = start.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    while at < end:
        if (at + timedelta(hours=1)).astimezone(tz).utcoffset() != at.astimezone(tz).utcoffset():
            out.append(at)
        at += timedelta(hours=1)
    return out


async def matching_times(
    client: Client, schedule: str, start: datetime, end: datetime
) -> list[datetime]:
    """The instants in [start, end] at which the server's schedule would fire."""
    from google.protobuf.timestamp_pb2 import Timestamp
    from temporalio.api.workflowservice.v1 import ListScheduleMatchingTimesRequest

    def stamp(at: datetime) -> Timestamp:
        out = Timestamp()
        out.FromDatetime(at.astimezone(UTC).replace(tzinfo=None))
        return out

    found: list[datetime] = []
    cursor = start
    while cursor <= end:
        reply = await client.workflow_service.list_schedule_matching_times(
            ListScheduleMatchingTimesRequest(
                namespace=client.namespace,
                schedule_id=schedule,
                start_time=stamp(cursor),
                end_time=stamp(end),
            )
        )
        times = [t.ToDatetime().replace(tzinfo=UTC) for t in reply.start_time]
        times = [t for t in times if t >= cursor]
        if not times:
            break
        found.extend(times)
        if len(times) < 1000:
            break
        cursor = times[-1] + timedelta(seconds=1)
    return sorted(set(found))


def _spec(config: LoopConfig, skip: list[Any]) -> ScheduleSpec:
    from temporalio.client import ScheduleSpec

    return ScheduleSpec(
        calendars=calendars(config.schedule), skip=skip, time_zone_name=config.timezone
    )


def _schedule(
    loop: str, config: LoopConfig, spec: ScheduleSpec, paused: bool, task_queue: str
) -> Any:
    from temporalio.client import (
        Schedule,
        ScheduleActionStartWorkflow,
        ScheduleOverlapPolicy,
        SchedulePolicy,
        ScheduleState,
    )

    return Schedule(
        action=ScheduleActionStartWorkflow("Fire", loop, id=fire_id(loop), task_queue=task_queue),
        spec=spec,
        policy=SchedulePolicy(
            overlap=ScheduleOverlapPolicy.ALLOW_ALL,
            catchup_window=config.catch_up + CATCH_UP_MARGIN,
        ),
        state=ScheduleState(
            paused=paused,
            note=NOTE.format(loop=loop, spec=f"{config.schedule} {config.timezone}"),
        ),
    )


async def _put(client: Client, sid: str, schedule: Any) -> None:
    """Create the schedule, or replace what an existing one holds."""
    from temporalio.client import ScheduleAlreadyRunningError, ScheduleUpdate

    try:
        await client.create_schedule(sid, schedule)
    except ScheduleAlreadyRunningError:
        await client.get_schedule_handle(sid).update(
            lambda _input: ScheduleUpdate(schedule=schedule)
        )


async def delete(client: Client, sid: str) -> bool:
    """Delete a schedule; False when there was none."""
    from temporalio.service import RPCError, RPCStatusCode

    try:
        await client.get_schedule_handle(sid).delete()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


async def put_loop_schedules(
    client: Client,
    loop: str,
    config: LoopConfig,
    task_queue: str,
    start: datetime,
    end: datetime,
    *,
    ids: tuple[str, str] | None = None,
    paused: bool = False,
) -> tuple[str, str | None]:
    """Create or update the loop's schedules, patched for daylight saving in [start, end].

    Returns the ids of the schedules made (the second None when no patch is needed).
    `ids` names other schedules (a check makes throwaway ones).
    """
    from temporalio.client import ScheduleSpec

    main_id, dst_id = ids or (schedule_id(loop), dst_schedule_id(loop))

    def schedule(spec: ScheduleSpec, paused: bool) -> Any:
        return _schedule(loop, config, spec, paused, task_queue)

    # Paused until patched: no fire may come from the unpatched spec.
    await _put(client, main_id, schedule(_spec(config, []), True))
    skip, extra = await _patches(client, main_id, config, start, end)
    if skip:
        await _put(client, main_id, schedule(_spec(config, skip), True))
        _, still = await _patches(client, main_id, config, start, end)
        extra = sorted(set(extra) | set(still))
    made_dst: str | None = None
    if extra:
        spec = ScheduleSpec(calendars=[_instant(at, "UTC") for at in extra], time_zone_name="UTC")
        await _put(client, dst_id, schedule(spec, paused))
        made_dst = dst_id
    else:
        await delete(client, dst_id)
    if not paused:
        await client.get_schedule_handle(main_id).unpause(note="patched for daylight saving")
    return main_id, made_dst


async def _patches(
    client: Client, sid: str, config: LoopConfig, start: datetime, end: datetime
) -> tuple[list[Any], list[datetime]]:
    """Wall times to skip in the main schedule, and UTC instants the dst schedule adds."""
    cron = Schedule(config.schedule, config.timezone)
    skip: list[Any] = []
    extra: list[datetime] = []
    for change in offset_changes(config.timezone, start, end):
        low, high = change - WINDOW, change + WINDOW
        ours = set(cron.fires_between(low, high))
        theirs = set(await matching_times(client, sid, low, high))
        skip += [_instant(at, config.timezone) for at in sorted(theirs - ours)]
        extra += sorted(ours - theirs)
    return skip, extra


async def fire_times(
    client: Client, loop: str, config: LoopConfig, start: datetime, end: datetime, ids: tuple
) -> list[datetime]:
    """When the engine's schedules for the loop fire in [start, end] (both schedules)."""
    main_id, dst_id = ids
    found = set(await matching_times(client, main_id, start, end))
    if dst_id:
        found |= set(await matching_times(client, dst_id, start, end))
    return sorted(found)
