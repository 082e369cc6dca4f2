"""The driver's timer: it sleeps until the next cron fire when that comes before the next poll,
and a reload re-arms it for the new schedule (fixed datetimes; nothing waits on a clock)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

import daemon.agents.processes as processes
from daemon.daemon import POLL_SECONDS, Daemon
from tests.test_service import NOW, home_with

MS = timedelta(milliseconds=1)


@pytest.fixture
def no_subreaper(monkeypatch: pytest.MonkeyPatch) -> None:
    """Daemon.start in the test process must not make pytest the subreaper of everything."""
    monkeypatch.setattr(processes, "set_child_subreaper", lambda: False)


def test_the_driver_wakes_at_the_fire_not_at_the_next_poll(
    tmp_path: Path, no_subreaper: None
) -> None:
    home = home_with(tmp_path, schedule=["*/10 * * * *"])
    daemon = Daemon.start(home, NOW)
    try:
        fire = NOW + timedelta(minutes=10)
        assert daemon.timer.next_wake() == fire
        assert daemon.sleep_for(NOW + timedelta(minutes=5)) == POLL_SECONDS
        assert daemon.sleep_for(fire - 50 * MS) == pytest.approx(0.05)
        assert daemon.sleep_for(fire) == 0.0
        daemon.tick(fire)  # the fire is taken at its second
        assert daemon.timer.next_wake() == fire + timedelta(minutes=10)
        assert daemon.sleep_for(fire + 20 * MS) == POLL_SECONDS
        events = [e for e in daemon.ctx.store.events.read() if e.get("kind") == "schedule"]
        assert [e["loop"] for e in events] == ["app"]
        assert events[0]["run"].startswith("20261129T021000Z")  # the run of that fire
    finally:
        daemon.stop(NOW + timedelta(minutes=11), grace=0)


def test_a_reload_re_arms_the_timer_for_the_new_schedule(
    tmp_path: Path, no_subreaper: None
) -> None:
    home = home_with(tmp_path, schedule=["0 3 * * *"])
    daemon = Daemon.start(home, NOW)
    try:
        assert daemon.timer.next_wake() == NOW + timedelta(hours=1)
        path = home.loops_dir / "app.toml"
        path.write_text(path.read_text().replace('"0 3 * * *"', '"2 2 * * *"'))
        now = NOW + timedelta(minutes=1)
        daemon.reload(now)
        fire = NOW + timedelta(minutes=2)
        assert daemon.timer.next_wake() == fire
        assert daemon.sleep_for(fire - 300 * MS) == pytest.approx(0.3)
    finally:
        daemon.stop(NOW + timedelta(minutes=3), grace=0)


def test_a_fire_a_tick_could_not_take_keeps_the_polls_pace(
    tmp_path: Path, no_subreaper: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = home_with(tmp_path, schedule=["*/10 * * * *"])
    daemon = Daemon.start(home, NOW)
    try:
        fire = NOW + timedelta(minutes=10)

        def broken(now):  # noqa: ANN001, ANN202 - the cursor file cannot be written, say
            raise OSError("disk full")

        monkeypatch.setattr(daemon.timer, "due", broken)
        with pytest.raises(OSError):
            daemon.tick(fire)
        # The fire is still ahead of the timer's cursor: no spin of failing ticks.
        assert daemon.timer.next_wake() == fire
        assert daemon.sleep_for(fire + 5 * MS) == POLL_SECONDS
    finally:
        daemon.stop(NOW + timedelta(minutes=11), grace=0)
