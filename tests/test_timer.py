"""The cron timer with fixed datetimes: due fires, misses, catch-up, restarts, reloads."""

from __future__ import annotations

import stat
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path

from daemon.config import LoopConfig
from daemon.scheduling.timer import MISSED_LIMIT, CronTimer, Fired
from daemon.state.records import Trigger


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def loop(schedule: list[str], catch_up: str = "1h", timezone: str = "UTC", **more) -> LoopConfig:
    return LoopConfig(
        repo="/tmp",
        task="t",
        schedule=schedule,
        catch_up=catch_up,
        timezone=timezone,
        **more,
    )


def state(tmp_path: Path) -> Path:
    return tmp_path / "state" / "schedule.toml"


def stored(tmp_path: Path) -> dict[str, datetime]:
    with state(tmp_path).open("rb") as fh:
        data = tomllib.load(fh)
    return {name: entry["handled_until"] for name, entry in data["loops"].items()}


def triggers(fired: list[Fired]) -> list[Trigger]:
    return [f.trigger for f in fired if f.trigger is not None]


def misses(fired: list[Fired]) -> list[str]:
    return [m["fire"] for f in fired for m in f.missed]


def tick(timer: CronTimer, now: datetime) -> list[Fired]:
    """`due` and `take_missed` as one tick sees them, in the shape `start` returns."""
    got = [Fired(t, []) for t in timer.due(now)]
    missed = timer.take_missed()
    return got + ([Fired(None, missed)] if missed else [])


# first start, ticks -----------------------------------------------------------------------
def test_first_start_misses_nothing_and_records_now(tmp_path: Path) -> None:
    timer = CronTimer(state(tmp_path))
    now = utc(2026, 5, 1, 2, 30)
    assert timer.start({"nightly": loop(["0 2 * * *"])}, now) == []
    assert stored(tmp_path) == {"nightly": now}
    assert timer.next_fire("nightly") == utc(2026, 5, 2, 2)
    assert stat.S_IMODE(state(tmp_path).stat().st_mode) == 0o600


def test_every_minute_is_due_each_minute_once(tmp_path: Path) -> None:
    timer = CronTimer(state(tmp_path))
    start = utc(2026, 5, 1, 9, 0, 30)
    timer.start({"tick": loop(["* * * * *"])}, start)
    got = []
    now = start
    while now < utc(2026, 5, 1, 9, 10, 30):  # a tick every 10 seconds for 10 minutes
        now += timedelta(seconds=10)
        for fired in tick(timer, now):
            assert fired.missed == []
            got.append((now, fired.trigger))
    assert len(got) == 10
    assert [t.kind for _, t in got] == ["schedule"] * 10
    assert [n for n, _ in got] == [utc(2026, 5, 1, 9, m, 0) for m in range(1, 11)]
    assert all(t.loop == "tick" and t.ts == n for n, t in got)


def test_not_due_before_the_fire(tmp_path: Path) -> None:
    timer = CronTimer(state(tmp_path))
    timer.start({"nightly": loop(["0 2 * * *"])}, utc(2026, 5, 1, 1))
    assert tick(timer, utc(2026, 5, 1, 1, 59, 59)) == []
    fired = tick(timer, utc(2026, 5, 1, 2, 0, 1))
    assert [t.kind for t in triggers(fired)] == ["schedule"]
    assert "2026-05-01T02:00+00:00" in fired[0].trigger.reason
    assert tick(timer, utc(2026, 5, 1, 2, 0, 2)) == []
    assert timer.next_fire("nightly") == utc(2026, 5, 2, 2)


def test_handled_time_is_persisted_before_the_trigger_is_returned(tmp_path: Path) -> None:
    timer = CronTimer(state(tmp_path))
    timer.start({"nightly": loop(["0 2 * * *"])}, utc(2026, 5, 1, 1))
    assert triggers(tick(timer, utc(2026, 5, 1, 2, 0, 1)))
    assert stored(tmp_path)["nightly"] >= utc(2026, 5, 1, 2)


def test_several_fires_in_one_tick_give_one_trigger_and_misses(tmp_path: Path) -> None:
    timer = CronTimer(state(tmp_path))
    timer.start({"tick": loop(["* * * * *"])}, utc(2026, 5, 1, 9, 0, 30))
    fired = tick(timer, utc(2026, 5, 1, 9, 5, 10))  # the daemon was busy for almost 5 minutes
    assert [t.kind for t in triggers(fired)] == ["schedule"]
    assert misses(fired) == [f"2026-05-01T09:0{m}:00.000000Z" for m in (1, 2, 3, 4)]
    details = [m for f in fired for m in f.missed]
    assert {m["loop"] for m in details} == {"tick"}
    assert all("busy" in m["why"] for m in details)


def test_due_returns_triggers_and_keeps_misses_for_take_missed(tmp_path: Path) -> None:
    timer = CronTimer(state(tmp_path))
    timer.start({"tick": loop(["* * * * *"])}, utc(2026, 5, 1, 9, 0, 30))
    assert timer.take_missed() == []
    [trigger] = timer.due(utc(2026, 5, 1, 9, 3, 10))
    assert (trigger.loop, trigger.kind) == ("tick", "schedule")
    assert [m["fire"] for m in timer.take_missed()] == [
        "2026-05-01T09:01:00.000000Z",
        "2026-05-01T09:02:00.000000Z",
    ]
    assert timer.take_missed() == []


def test_a_late_tick_within_catch_up_is_a_catch_up(tmp_path: Path) -> None:
    timer = CronTimer(state(tmp_path))
    timer.start({"hourly": loop(["0 * * * *"], catch_up="1h")}, utc(2026, 5, 1, 8, 30))
    fired = tick(timer, utc(2026, 5, 1, 9, 20))  # the machine slept through 09:00
    assert [t.kind for t in triggers(fired)] == ["catch-up"]
    assert misses(fired) == ["2026-05-01T09:00:00.000000Z"]


def test_a_late_tick_outside_catch_up_is_only_a_miss(tmp_path: Path) -> None:
    timer = CronTimer(state(tmp_path))
    timer.start({"hourly": loop(["0 * * * *"], catch_up="10m")}, utc(2026, 5, 1, 8, 30))
    fired = tick(timer, utc(2026, 5, 1, 9, 20))
    assert triggers(fired) == []
    assert misses(fired) == ["2026-05-01T09:00:00.000000Z"]
    assert tick(timer, utc(2026, 5, 1, 9, 21)) == []


# restarts ---------------------------------------------------------------------------------
def test_restart_within_catch_up_runs_once(tmp_path: Path) -> None:
    CronTimer(state(tmp_path)).start({"nightly": loop(["0 2 * * *"])}, utc(2026, 5, 1, 1))
    # loopd was down from 01:00 to 02:30; the 02:00 fire is 30 minutes old, catch_up is 1h.
    fired = CronTimer(state(tmp_path)).start(
        {"nightly": loop(["0 2 * * *"])}, utc(2026, 5, 1, 2, 30)
    )
    assert [(t.loop, t.kind) for t in triggers(fired)] == [("nightly", "catch-up")]
    assert "2026-05-01T02:00+00:00" in fired[0].trigger.reason
    assert fired[0].missed == [
        {"loop": "nightly", "fire": "2026-05-01T02:00:00.000000Z", "why": "loopd was not running"}
    ]


def test_restart_outside_catch_up_reports_the_miss_only(tmp_path: Path) -> None:
    CronTimer(state(tmp_path)).start({"nightly": loop(["0 2 * * *"])}, utc(2026, 5, 1, 1))
    fired = CronTimer(state(tmp_path)).start(
        {"nightly": loop(["0 2 * * *"])}, utc(2026, 5, 1, 3, 1)
    )
    assert triggers(fired) == []
    assert misses(fired) == ["2026-05-01T02:00:00.000000Z"]


def test_many_misses_one_catch_up_every_miss_reported(tmp_path: Path) -> None:
    config = {"hourly": loop(["0 * * * *"])}
    CronTimer(state(tmp_path)).start(config, utc(2026, 5, 1, 0, 30))
    fired = CronTimer(state(tmp_path)).start(config, utc(2026, 5, 1, 10, 20))
    assert len(triggers(fired)) == 1 and triggers(fired)[0].kind == "catch-up"
    assert misses(fired) == [f"2026-05-01T{h:02d}:00:00.000000Z" for h in range(1, 11)]


def test_catch_up_window_boundaries(tmp_path: Path) -> None:
    config = {"nightly": loop(["0 2 * * *"], catch_up="1h")}
    for now, expected in (
        (utc(2026, 5, 1, 2, 59), ["catch-up"]),
        (utc(2026, 5, 1, 3, 0), ["catch-up"]),
        (utc(2026, 5, 1, 3, 1), []),
    ):
        path = tmp_path / f"{now:%H%M}.toml"
        CronTimer(path).start(config, utc(2026, 5, 1, 1))
        assert [t.kind for t in triggers(CronTimer(path).start(config, now))] == expected


def test_no_double_fire_after_a_restart(tmp_path: Path) -> None:
    config = {"nightly": loop(["0 2 * * *"])}
    first = CronTimer(state(tmp_path))
    first.start(config, utc(2026, 5, 1, 1))
    assert len(triggers(tick(first, utc(2026, 5, 1, 2, 0, 5)))) == 1
    # kill -9 right after the trigger left; a new daemon at the same moment and later
    for now in (utc(2026, 5, 1, 2, 0, 5), utc(2026, 5, 1, 2, 10)):
        again = CronTimer(state(tmp_path))
        assert again.start(config, now) == []
        assert tick(again, now) == []
        assert again.next_fire("nightly") == utc(2026, 5, 2, 2)


def test_no_double_catch_up_after_a_second_restart(tmp_path: Path) -> None:
    config = {"nightly": loop(["0 2 * * *"])}
    CronTimer(state(tmp_path)).start(config, utc(2026, 5, 1, 1))
    assert triggers(CronTimer(state(tmp_path)).start(config, utc(2026, 5, 1, 2, 30)))
    assert CronTimer(state(tmp_path)).start(config, utc(2026, 5, 1, 2, 30)) == []
    assert CronTimer(state(tmp_path)).start(config, utc(2026, 5, 1, 2, 40)) == []


def test_a_clock_that_went_back_does_not_fire_again(tmp_path: Path) -> None:
    config = {"nightly": loop(["0 2 * * *"])}
    timer = CronTimer(state(tmp_path))
    timer.start(config, utc(2026, 5, 1, 1))
    assert triggers(tick(timer, utc(2026, 5, 1, 2, 0, 5)))
    back = CronTimer(state(tmp_path))
    assert back.start(config, utc(2026, 5, 1, 1, 50)) == []
    assert tick(back, utc(2026, 5, 1, 2, 0, 30)) == []
    assert back.next_fire("nightly") == utc(2026, 5, 2, 2)


def test_a_very_long_outage_lists_misses_up_to_the_limit(tmp_path: Path) -> None:
    config = {"tick": loop(["* * * * *"])}
    CronTimer(state(tmp_path)).start(config, utc(2026, 5, 1))
    fired = CronTimer(state(tmp_path)).start(config, utc(2026, 5, 3))  # 2880 misses
    assert [t.kind for t in triggers(fired)] == ["catch-up"]
    missed = fired[0].missed
    assert len(missed) == MISSED_LIMIT
    assert missed[0]["fire"] == "2026-05-01T00:01:00.000000Z"
    assert missed[-1]["unlisted_until"] == "2026-05-03T00:00:00.000000Z"
    assert "unlisted_until" not in missed[0]


def test_unreadable_state_starts_from_now(tmp_path: Path) -> None:
    state(tmp_path).parent.mkdir(parents=True)
    state(tmp_path).write_text("this is [not toml")
    timer = CronTimer(state(tmp_path))
    assert timer.start({"nightly": loop(["0 2 * * *"])}, utc(2026, 5, 1, 3)) == []
    assert stored(tmp_path) == {"nightly": utc(2026, 5, 1, 3)}


# which loops, timezones, reloads ------------------------------------------------------------
def test_loops_without_schedule_or_disabled_are_not_timed(tmp_path: Path) -> None:
    timer = CronTimer(state(tmp_path))
    loops = {
        "none": loop([]),
        "off": loop(["* * * * *"], enabled=False),
        "on": loop(["* * * * *"]),
    }
    timer.start(loops, utc(2026, 5, 1, 9))
    assert timer.next_fire("none") is None and timer.next_fire("off") is None
    assert [t.loop for t in triggers(tick(timer, utc(2026, 5, 1, 9, 1)))] == ["on"]
    assert set(stored(tmp_path)) == {"on"}


def test_loop_timezone(tmp_path: Path) -> None:
    timer = CronTimer(state(tmp_path))
    timer.start({"berlin": loop(["0 2 * * *"], timezone="Europe/Berlin")}, utc(2026, 1, 14, 12))
    assert timer.next_fire("berlin") == utc(2026, 1, 15, 1)
    assert tick(timer, utc(2026, 1, 15, 0, 59)) == []
    fired = tick(timer, utc(2026, 1, 15, 1, 0, 1))
    assert [t.kind for t in triggers(fired)] == ["schedule"]
    assert "2026-01-15T02:00+01:00" in fired[0].trigger.reason


def test_a_cursor_file_with_a_byte_that_is_not_utf8_starts_from_now(tmp_path: Path) -> None:
    state(tmp_path).parent.mkdir(parents=True)
    state(tmp_path).write_bytes(b"[loops.a]\nhandled_until = 2026-05-01T00:00:00Z # \xff\n")
    warned = []
    timer = CronTimer(state(tmp_path), warn=warned.append)
    assert timer.start({"a": loop(["0 2 * * *"])}, utc(2026, 5, 2, 3)) == []
    [problem] = warned
    assert problem.path == state(tmp_path) and "starts from now" in problem.reason
    assert timer.next_fire("a") == utc(2026, 5, 3, 2)
    assert stored(tmp_path) == {"a": utc(2026, 5, 2, 3)}


def test_update_new_loop_starts_from_now(tmp_path: Path) -> None:
    timer = CronTimer(state(tmp_path))
    timer.start({}, utc(2026, 5, 1, 1))
    timer.update({"nightly": loop(["0 2 * * *"])}, utc(2026, 5, 1, 3))
    assert timer.next_fire("nightly") == utc(2026, 5, 2, 2)
    assert tick(timer, utc(2026, 5, 1, 3, 0, 1)) == []
    assert stored(tmp_path) == {"nightly": utc(2026, 5, 1, 3)}


def test_update_drops_removed_loops(tmp_path: Path) -> None:
    timer = CronTimer(state(tmp_path))
    timer.start({"a": loop(["0 2 * * *"]), "b": loop(["0 2 * * *"])}, utc(2026, 5, 1))
    timer.update({"a": loop(["0 2 * * *"])}, utc(2026, 5, 1, 1))
    assert timer.next_fire("b") is None
    assert set(stored(tmp_path)) == {"a"}
    assert [t.loop for t in triggers(tick(timer, utc(2026, 5, 1, 2, 0, 1)))] == ["a"]


def test_update_recomputes_a_changed_schedule_from_now(tmp_path: Path) -> None:
    timer = CronTimer(state(tmp_path))
    timer.start({"a": loop(["0 2 * * *"])}, utc(2026, 5, 1))
    timer.update({"a": loop(["*/10 * * * *"])}, utc(2026, 5, 1, 12, 5))
    assert timer.next_fire("a") == utc(2026, 5, 1, 12, 10)
    assert tick(timer, utc(2026, 5, 1, 12, 9)) == []  # nothing "missed" since midnight
    timer.update({"a": loop(["*/10 * * * *"], timezone="Europe/Berlin")}, utc(2026, 5, 1, 12, 9))
    assert timer.next_fire("a") == utc(2026, 5, 1, 12, 10)


def test_update_keeps_the_cursor_of_an_unchanged_schedule(tmp_path: Path) -> None:
    timer = CronTimer(state(tmp_path))
    timer.start({"a": loop(["0 2 * * *"])}, utc(2026, 5, 1, 1))
    # the reload lands a second after the fire, before the tick that would take it
    timer.update({"a": loop(["0 2 * * *"], catch_up="2h")}, utc(2026, 5, 1, 2, 0, 1))
    assert [t.kind for t in triggers(tick(timer, utc(2026, 5, 1, 2, 0, 2)))] == ["schedule"]


def test_next_wake_is_the_earliest_fire_of_any_loop(tmp_path: Path) -> None:
    timer = CronTimer(state(tmp_path))
    assert timer.next_wake() is None
    timer.start({"a": loop(["0 2 * * *"]), "b": loop(["*/15 * * * *"])}, utc(2026, 5, 1, 1, 50))
    assert timer.next_wake() == utc(2026, 5, 1, 2, 0)
    tick(timer, utc(2026, 5, 1, 2, 0))
    assert timer.next_wake() == utc(2026, 5, 1, 2, 15)
    timer.update({"a": loop(["0 2 * * *"])}, utc(2026, 5, 1, 2, 1))
    assert timer.next_wake() == utc(2026, 5, 2, 2, 0)


# a fire handed out ahead (the daemon's lead) -----------------------------------------------
LEAD = timedelta(seconds=5)


def test_a_fire_within_the_lead_is_handed_out_ahead_to_run_at_its_second(tmp_path: Path) -> None:
    timer = CronTimer(state(tmp_path), lead=LEAD)
    timer.start({"nightly": loop(["0 2 * * *"], timezone="Europe/Berlin")}, utc(2026, 5, 1, 23))
    fire = utc(2026, 5, 2, 0, 0)  # 02:00 in Berlin (summer time)
    assert timer.next_wake() == fire - LEAD  # the driver's timer is armed for the hand-out
    assert timer.due(fire - LEAD - timedelta(milliseconds=1)) == []
    [trigger] = timer.due(fire - LEAD)
    assert (trigger.kind, trigger.not_before, trigger.ts) == ("schedule", fire, fire - LEAD)
    assert "2026-05-02T02:00+02:00" in trigger.reason
    assert stored(tmp_path)["nightly"] == fire  # persisted before it left: never twice
    assert timer.take_missed() == []
    assert timer.due(fire) == [] and timer.due(fire + timedelta(seconds=30)) == []
    assert timer.next_fire("nightly") == utc(2026, 5, 3, 0, 0)
    assert timer.next_wake() == utc(2026, 5, 3, 0, 0) - LEAD


def test_a_late_fire_is_taken_as_before_and_the_next_one_is_not_early(tmp_path: Path) -> None:
    timer = CronTimer(state(tmp_path), lead=LEAD)
    timer.start({"tick": loop(["* * * * *"])}, utc(2026, 5, 1, 9, 0, 30))
    # The daemon stalled past 09:01 until 5 s before 09:02: the 09:01 fire runs now, late.
    [late] = timer.due(utc(2026, 5, 1, 9, 1, 55))
    assert (late.kind, late.not_before) == ("schedule", None)
    assert "09:01" in late.reason and timer.take_missed() == []
    [ahead] = timer.due(utc(2026, 5, 1, 9, 1, 56))
    assert ahead.not_before == utc(2026, 5, 1, 9, 2)


def test_without_a_lead_a_fire_waits_for_its_second(tmp_path: Path) -> None:
    timer = CronTimer(state(tmp_path))
    timer.start({"nightly": loop(["0 2 * * *"])}, utc(2026, 5, 1, 1))
    assert timer.next_wake() == utc(2026, 5, 1, 2)
    assert timer.due(utc(2026, 5, 1, 1, 59, 59, 999000)) == []
    [trigger] = timer.due(utc(2026, 5, 1, 2))
    assert trigger.not_before is None
