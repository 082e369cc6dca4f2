"""Tests that kill mutants of cron and the run queue that the other tests let live
(bench/mutation.py): errors that name their field, the edges of a range, fire times that do
not depend on the machine's own zone, the queue's decisions word for word."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import tzlocal

from daemon.config import LoopConfig
from daemon.scheduling.cron import CronExpression, Schedule
from daemon.scheduling.queue import RunQueue
from daemon.state.records import Trigger


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# -- cron ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("a-5 * * * *", "'a' is not a number in the minute field"),
        ("* * 1-b * *", "'b' is not a number in the day-of-month field"),
        ("1-2-3 * * * *", "'2-3' is not a number in the minute field"),
        ("5-99 * * * *", "'5-99' is outside 0-59 in the minute field"),
        ("* 0-24 * * *", "'0-24' is outside 0-23 in the hour field"),
        ("* * * 0-5 *", "'0-5' is outside 1-12 in the month field"),
    ],
)
def test_a_bad_range_names_its_part_and_field(expression: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        CronExpression.parse(expression)
    assert str(caught.value) == f"cron expression {expression!r}: {message}"


def test_a_wrong_count_of_fields_says_what_to_write() -> None:
    with pytest.raises(ValueError) as caught:
        CronExpression.parse("0 2 * *")
    assert str(caught.value) == (
        "cron expression '0 2 * *' has 4 fields; write five: "
        "minute hour day-of-month month day-of-week, such as '0 2 * * *'"
    )


def test_an_expression_keeps_its_text_and_sunday_is_zero() -> None:
    daily = CronExpression.parse("@daily")
    assert daily.text == "@daily" and daily.minute == (0,) and daily.hour == (0,)
    assert CronExpression.parse("0 0 * * 7").dow == (0,)
    assert CronExpression.parse("0 0 * * 5-7").dow == (0, 5, 6)


def test_fires_between_stops_at_its_limit() -> None:
    every = Schedule(["* * * * *"])
    got = every.fires_between(utc(2026, 1, 1), utc(2026, 1, 2), limit=3)
    assert got == [utc(2026, 1, 1, 0, 1), utc(2026, 1, 1, 0, 2), utc(2026, 1, 1, 0, 3)]
    assert every.fires_between(utc(2026, 1, 1), utc(2026, 1, 2), limit=0) == []


# The machine's own zone: far from UTC and the loops' zones; Berlin's winter offset all year,
# and its summer one; behind UTC.
@pytest.fixture(params=["Asia/Kathmandu", "Etc/GMT-1", "Etc/GMT-2", "Etc/GMT+10"])
def far_from_utc(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The machine's own zone set to one of those."""
    monkeypatch.setenv("TZ", request.param)
    time.tzset()
    tzlocal.reload_localzone()  # APScheduler asks tzlocal, which keeps the zone it first read
    yield
    monkeypatch.undo()
    time.tzset()
    tzlocal.reload_localzone()


def test_fire_times_do_not_depend_on_the_machines_zone(far_from_utc: None) -> None:
    berlin = Schedule(["0 2 * * *"], "Europe/Berlin")
    assert berlin.next_fire(utc(2026, 1, 15)) == utc(2026, 1, 15, 1)
    assert berlin.next_fire(utc(2026, 7, 14, 12)) == utc(2026, 7, 15, 0)
    # `after` given in another zone means the same instant.
    assert berlin.next_fire(utc(2026, 1, 15).astimezone()) == utc(2026, 1, 15, 1)
    assert Schedule(["0 9 * * *"]).next_fire(utc(2026, 1, 15)) == utc(2026, 1, 15, 9)
    gap = Schedule(["30 2 * * *"], "Europe/Berlin")
    assert gap.fires_between(utc(2026, 3, 28, 12), utc(2026, 3, 30, 12)) == [
        utc(2026, 3, 29, 1, 30),
        utc(2026, 3, 30, 0, 30),
    ]
    assert gap.next_fire(utc(2026, 3, 29, 1, 10)) == utc(2026, 3, 29, 1, 30)
    hourly = Schedule(["0 * * * *"], "Europe/Berlin")
    assert hourly.fires_between(utc(2026, 10, 24, 23, 30), utc(2026, 10, 25, 3)) == [
        utc(2026, 10, 25, 0),
        utc(2026, 10, 25, 2),
        utc(2026, 10, 25, 3),
    ]
    assert hourly.next_fire(utc(2026, 10, 25, 1, 15)) == utc(2026, 10, 25, 2)
    fires = berlin.fires_between(utc(2026, 1, 1), utc(2026, 1, 3))
    assert all(f.utcoffset() == timedelta(0) for f in fires) and len(fires) == 2


# -- the run queue -------------------------------------------------------------------------------


def loop_config(overlap: str = "coalesce", max_queued: int = 10) -> LoopConfig:
    return LoopConfig(repo="/tmp", task="t", overlap=overlap, max_queued=max_queued)  # type: ignore[arg-type]


def trig(loop: str = "app", n: int = 0) -> Trigger:
    return Trigger(loop=loop, kind="push", reason=f"trigger {n}", ts=utc(2026, 5, 1, 9, 0, n))


NOW = utc(2026, 5, 1, 9)


def test_the_version_only_grows_so_two_changes_never_look_like_none() -> None:
    queue = RunQueue()
    seen = [queue.version]
    steps = [
        lambda: queue.offer(trig("a", 1), loop_config("queue"), NOW),
        lambda: queue.next_ready(5),
        lambda: queue.offer(trig("a", 2), loop_config("queue"), NOW),
        lambda: queue.offer(trig("a", 3), loop_config("coalesce"), NOW),  # merged
        lambda: queue.cancel_pending("a"),
        lambda: queue.offer(trig("b", 4), loop_config("queue"), NOW),
    ]
    for step in steps:
        step()
        seen.append(queue.version)
    assert seen == sorted(set(seen)), seen


def test_the_oldest_arrival_starts_first_whichever_loop_was_seen_first() -> None:
    queue = RunQueue()
    queue.offer(trig("a", 1), loop_config("queue"), NOW)
    b = queue.offer(trig("b", 2), loop_config("queue"), NOW).pending_id
    first = queue.next_ready(5)
    assert first is not None and first.loop == "a"
    queue.offer(trig("a", 3), loop_config("queue"), NOW)
    queue.finished("a")
    # a's new run arrived after b's: b's goes first, though loop a was queued first.
    nxt = queue.next_ready(5)
    assert nxt is not None and nxt.id == b
    assert [p.loop for p in queue.pending()] == ["a"]


def test_a_taken_id_is_asked_again_with_the_next_bump() -> None:
    asked: list[int] = []

    def new_id(loop: str, now: datetime, bump: int) -> str:
        asked.append(bump)
        return f"{loop}-{bump}"

    queue = RunQueue(new_id=new_id)
    policy = loop_config("queue")
    ids = [queue.offer(trig("a", n), policy, NOW).pending_id for n in range(3)]
    assert ids == ["a-0", "a-1", "a-2"]
    assert asked == [0, 0, 1, 0, 1, 2]
    # The active run's id is taken too.
    asked.clear()
    queue.next_ready(5)
    queue.cancel_pending("a")
    assert queue.offer(trig("a", 4), policy, NOW).pending_id == "a-1"
    assert asked == [0, 1]


def test_cancelling_one_loop_reaches_it_past_the_others() -> None:
    queue = RunQueue()
    queue.offer(trig("a", 1), loop_config(), NOW)
    queue.offer(trig("b", 2), loop_config(), NOW)
    queue.offer(trig("c", 3), loop_config(), NOW)
    assert [r.loop for r in queue.cancel_pending("c")] == ["c"]
    assert [p.loop for p in queue.pending()] == ["a", "b"]


def test_a_run_started_without_an_id_is_active_with_an_unknown_one() -> None:
    queue = RunQueue()
    assert queue.active("x") is None
    queue.started("x")
    assert queue.active("x") == ""
    queue.started("x", "20260501T090000Z-x-0001")
    queue.started("x")  # a confirmation without the id keeps it
    assert queue.active("x") == "20260501T090000Z-x-0001"
    queue.finished("x")
    queue.finished("never-started")  # nothing to end: no error
    assert queue.active("x") is None


def test_skipped_and_dropped_triggers_say_why() -> None:
    queue = RunQueue()
    queue.offer(trig("a", 1), loop_config("skip"), NOW)
    skipped = queue.offer(trig("a", 2), loop_config("skip"), NOW)
    assert (skipped.action, skipped.event) == ("skipped", "trigger_skipped")
    assert skipped.why == "a run of this loop is active or pending" and skipped.pending_id == ""
    queue.offer(trig("b", 1), loop_config("queue", max_queued=1), NOW)
    full = queue.offer(trig("b", 2), loop_config("queue", max_queued=1), NOW)
    assert (full.action, full.event) == ("dropped_queue_full", "trigger_skipped")
    assert full.why == "queue full (max_queued = 1)"
