"""A schedule that keeps firing while it cannot run: one event when a hold (or a streak of
skips for one reason) starts, one `skips_counted` with the count when it ends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from daemon.people.escalation import resolve, write_escalation
from daemon.service.intake import Intake
from daemon.state.records import RunRecord, RunTrigger, Trigger
from tests.test_service import Clocks, context, home_with, intake_of

NOW = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)
SKIPS = ("trigger", "trigger_skipped", "held", "skips_counted")


def fires(ctx: Any, intake: Intake, clocks: Clocks, minutes: int) -> None:
    """The cron timer's ticks, one a minute, as the daemon takes them."""
    for _ in range(minutes):
        clocks.offset += timedelta(minutes=1)
        intake.take_schedule(clocks.wall())
        intake.save()


def taken(ctx: Any) -> list[dict[str, Any]]:
    return [e for e in ctx.store.events.read() if e["type"] in SKIPS]


def test_a_held_schedule_records_one_held_event_per_hold(tmp_path: Path) -> None:
    clocks = Clocks()
    ctx = context(home_with(tmp_path, paused=False, schedule=["* * * * *"]), clocks)
    intake = intake_of(ctx)
    intake.start_schedule(clocks.wall())
    store = ctx.store
    run = RunRecord(
        id=store.new_run_id("app", NOW),
        loop="app",
        task="t",
        trigger=RunTrigger(kind="schedule"),
        started=NOW,
        outcome="escalated",
        reason="attempts used up; checks still fail",
    )
    write_escalation(store, run, NOW)

    fires(ctx, intake, clocks, 60)  # an hour of a cron every minute, held
    [held] = taken(ctx)
    assert held["type"] == "held" and held["loop"] == "app" and held["escalation"] == run.id
    assert held["kind"] == "schedule" and "escalation" in held["why"]

    # A hold ends when a fire goes through: its count is recorded once, with the span.
    resolve(store, run.id, clocks.wall())
    fires(ctx, intake, clocks, 1)
    events = taken(ctx)
    assert [e["type"] for e in events] == ["held", "skips_counted", "trigger"]
    counted = events[1]
    assert counted["of"] == "held" and counted["count"] == 60
    assert counted["escalation"] == run.id
    assert counted["since"][:16] == held["ts"][:16] == "2026-11-29T02:01"
    assert counted["until"][:16] == "2026-11-29T03:00"

    # A new escalation is a new hold: one more `held`.
    again = run.model_copy(update={"id": store.new_run_id("app", NOW + timedelta(hours=2))})
    write_escalation(store, again, clocks.wall())
    fires(ctx, intake, clocks, 30)
    assert [e["type"] for e in taken(ctx)][3:] == ["held"]


def test_a_repeated_skip_is_recorded_once_per_reason_with_its_count(tmp_path: Path) -> None:
    clocks = Clocks()
    home = home_with(tmp_path, paused=False, schedule=["* * * * *"], overlap="skip")
    ctx = context(home, clocks)
    intake = intake_of(ctx)
    intake.start_schedule(clocks.wall())
    intake.queue.started("app", "20261129T020000000000Z-app-aaaa")  # a run is under way

    fires(ctx, intake, clocks, 45)
    events = taken(ctx)
    assert [e["type"] for e in events] == ["trigger", "trigger_skipped"]
    assert events[1]["why"] == "a run of this loop is active or pending"

    # Another reason: the streak so far is counted, the new reason recorded once.
    (home.loops_dir / "app.toml").write_text(
        (home.loops_dir / "app.toml").read_text() + "enabled = false\n"
    )
    ctx.config = home.load()
    fires(ctx, intake, clocks, 10)
    events = taken(ctx)
    types = [e["type"] for e in events]
    assert types == ["trigger", "trigger_skipped", "skips_counted", "trigger_skipped"], types
    assert events[2]["count"] == 45 and events[2]["of"] == "trigger_skipped"
    assert events[3]["why"].startswith("loop disabled")

    # loopd stopping records the streak under way.
    intake.skips.end_all()
    assert taken(ctx)[-1]["type"] == "skips_counted" and taken(ctx)[-1]["count"] == 10


def test_each_inbox_trigger_held_keeps_its_own_event(tmp_path: Path) -> None:
    """A person may wait on an inbox file's event (`loopd trigger --wait`): never folded."""
    clocks = Clocks()
    ctx = context(home_with(tmp_path, paused=False), clocks)
    intake = intake_of(ctx)
    for n in range(3):
        trigger = Trigger(loop="nowhere", kind="manual", reason=f"r{n}", ts=NOW)
        trigger.id = ctx.store.put_trigger(trigger).name
        intake.offer(trigger, clocks.wall())
    skipped = [e for e in taken(ctx) if e["type"] == "trigger_skipped"]
    assert len(skipped) == 3 and len({e["inbox"] for e in skipped}) == 3


def test_a_held_count_outlives_a_daemon_that_was_killed(tmp_path: Path) -> None:
    """The daemon keeps its streaks in state/skips.json: a second life, after a kill -9
    that recorded nothing, goes on counting the same hold and records it whole once."""
    from daemon.scheduling.queue import RunQueue
    from daemon.scheduling.timer import CronTimer
    from daemon.service.skips import SKIPS_FILE

    clocks = Clocks()
    home = home_with(tmp_path, paused=False, schedule=["* * * * *"])

    def life() -> tuple[Any, Intake]:
        ctx = context(home, clocks)
        timer = CronTimer(ctx.store.root / "schedule.toml")
        intake = Intake(ctx, RunQueue(), timer, lambda _: False, ctx.store.root / SKIPS_FILE)
        intake.start_schedule(clocks.wall())
        return ctx, intake

    ctx, intake = life()
    run = RunRecord(id=ctx.store.new_run_id("app", NOW), loop="app", task="t",
                    trigger=RunTrigger(kind="schedule"), started=NOW, outcome="escalated",
                    reason="attempts used up")  # fmt: skip
    write_escalation(ctx.store, run, NOW)
    fires(ctx, intake, clocks, 30)
    # kill -9: no end_all, nothing recorded; the next life reads what the first one kept.
    ctx, intake = life()
    fires(ctx, intake, clocks, 10)
    resolve(ctx.store, run.id, clocks.wall())
    fires(ctx, intake, clocks, 1)
    events = taken(ctx)
    assert [e["type"] for e in events] == ["held", "skips_counted", "trigger"], events
    assert events[1]["count"] == 40 and events[1]["since"][:16] == events[0]["ts"][:16]
    assert (ctx.store.root / SKIPS_FILE).read_text().strip() == "{}"  # recorded: forgotten
