"""A wall clock that steps back (an NTP correction): the daemon records `clock_stepped_back`
and its schedules go on from the new now; a step forward keeps the catch-up policy."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import daemon.processes as processes
from daemon.daemon import Daemon
from daemon.state.store import StateStore
from tests.test_service import NOW, home_with


@pytest.fixture
def no_subreaper(monkeypatch: pytest.MonkeyPatch) -> None:
    """Daemon.start in the test process must not make pytest the subreaper of everything."""
    monkeypatch.setattr(processes, "set_child_subreaper", lambda: False)


def events_of(store: StateStore, *types: str) -> list[dict[str, Any]]:
    return [e for e in store.events.read() if e["type"] in types]


def ticks(daemon: Daemon, start: Any, minutes: int) -> None:
    """The daemon's ticks, one a minute from `start`, as `loopd run` drives them."""
    for minute in range(minutes):
        daemon.tick(start + timedelta(minutes=minute, seconds=5))


def test_a_clock_stepped_back_a_day_records_it_and_the_schedule_goes_on(
    tmp_path: Path, no_subreaper: None
) -> None:
    home = home_with(tmp_path, schedule=["*/10 * * * *"], catch_up="0s")
    store = StateStore(home.state_dir)
    daemon = Daemon.start(home, NOW)
    try:
        ticks(daemon, NOW, 31)  # 02:00 to 02:30: three fires
        assert len(events_of(store, "trigger")) == 3
        back = NOW + timedelta(minutes=31) - timedelta(days=1)  # NTP: the clock was a day ahead
        ticks(daemon, back, 60)  # an hour of ticks on the corrected clock
        [stepped] = events_of(store, "clock_stepped_back")
        assert stepped["loop"] == "app"
        assert stepped["handled_until"].startswith("2026-11-29T02:30")
        assert stepped["clock"].startswith("2026-11-28T02:31")
        fired = [e["reason"] for e in events_of(store, "trigger")][3:]
        # Every fire of the hour on the new clock, none silent, none twice.
        assert [r[-11:-6] for r in fired] == ["02:40", "02:50", "03:00", "03:10", "03:20", "03:30"]
        assert daemon.timer.next_fire("app") == back.replace(minute=40) + timedelta(hours=1)
    finally:
        daemon.stop(NOW, grace=0)
    # The cursor was written where the clock now is: a restart goes on from there too.
    again = Daemon.start(home, back + timedelta(hours=1, minutes=2))
    try:
        assert len(events_of(store, "clock_stepped_back")) == 1
        assert again.timer.next_fire("app") == back.replace(minute=40) + timedelta(hours=1)
    finally:
        again.stop(NOW, grace=0)


def test_a_clock_stepped_back_at_start_records_it(tmp_path: Path, no_subreaper: None) -> None:
    home = home_with(tmp_path, schedule=["0 2 * * *"], catch_up="1h")
    store = StateStore(home.state_dir)
    (store.root / "schedule.toml").write_text(
        f"[loops.app]\nhandled_until = {(NOW + timedelta(days=1)).isoformat()}\n"
    )
    daemon = Daemon.start(home, NOW - timedelta(minutes=5))
    try:
        [stepped] = events_of(store, "clock_stepped_back")
        assert stepped["handled_until"].startswith("2026-11-30T02:00")
        assert daemon.timer.next_fire("app") == NOW
        daemon.tick(NOW + timedelta(seconds=5))
        [trigger] = events_of(store, "trigger")
        assert trigger["kind"] == "schedule"
    finally:
        daemon.stop(NOW, grace=0)


def test_a_step_forward_keeps_the_catch_up_policy(tmp_path: Path, no_subreaper: None) -> None:
    home = home_with(tmp_path, schedule=["0 * * * *"], catch_up="2h")
    store = StateStore(home.state_dir)
    daemon = Daemon.start(home, NOW + timedelta(minutes=1))
    try:
        daemon.tick(NOW + timedelta(days=1, minutes=30))  # the clock jumps a day ahead
        events = events_of(store, "trigger", "schedule_missed", "clock_stepped_back")
        kinds = [e.get("kind") for e in events if e["type"] == "trigger"]
        assert kinds == ["catch-up"]  # the latest fire, within catch_up, run once
        assert len([e for e in events if e["type"] == "schedule_missed"]) == 24
        assert not [e for e in events if e["type"] == "clock_stepped_back"]
    finally:
        daemon.stop(NOW, grace=0)
