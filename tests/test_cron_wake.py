"""The driver's timer: it sleeps until the next cron fire's hand-out (FIRE_LEAD before the fire)
when that comes before the next poll, and a reload re-arms it for the new schedule (fixed
datetimes; nothing waits on a clock)."""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path

import pytest

import daemon.processes as processes
from daemon.clock import utc_now
from daemon.daemon import POLL_SECONDS, Daemon
from daemon.home import Home
from daemon.scheduling.timer import FIRE_LEAD
from tests.helpers import make_home, make_repo, runs, start_daemon, stop_daemon, talk, wait_for
from tests.test_service import NOW, home_with

MS = timedelta(milliseconds=1)


@pytest.fixture
def no_subreaper(monkeypatch: pytest.MonkeyPatch) -> None:
    """Daemon.start in the test process must not make pytest the subreaper of everything."""
    monkeypatch.setattr(processes, "set_child_subreaper", lambda: False)


def test_the_driver_wakes_for_the_fire_not_at_the_next_poll(
    tmp_path: Path, no_subreaper: None
) -> None:
    home = home_with(tmp_path, schedule=["*/10 * * * *"])
    daemon = Daemon.start(home, NOW)
    try:
        fire = NOW + timedelta(minutes=10)
        wake = fire - FIRE_LEAD  # the run is prepared meanwhile; its agent starts at `fire`
        assert daemon.timer.next_wake() == wake and daemon.timer.next_fire("app") == fire
        assert daemon.sleep_for(NOW + timedelta(minutes=5)) == POLL_SECONDS
        assert daemon.sleep_for(wake - 50 * MS) == pytest.approx(0.05)
        assert daemon.sleep_for(wake) == 0.0
        daemon.tick(wake)  # the fire is handed out at the wake, to run at its second
        assert daemon.timer.next_wake() == wake + timedelta(minutes=10)
        assert daemon.sleep_for(wake + 20 * MS) == POLL_SECONDS
        assert daemon.sleep_for(fire) == POLL_SECONDS  # nothing more to do at the fire
        events = [e for e in daemon.ctx.store.events.read() if e.get("kind") == "schedule"]
        assert [e["loop"] for e in events] == ["app"]
        assert events[0]["run"].startswith("20261129T021000Z")  # the run of that fire
        [pending] = daemon.intake.queue.pending("app")  # the loop is paused: it waits
        assert pending.trigger.not_before == fire
    finally:
        daemon.stop(NOW + timedelta(minutes=11), grace=0)


def test_a_reload_re_arms_the_timer_for_the_new_schedule(
    tmp_path: Path, no_subreaper: None
) -> None:
    home = home_with(tmp_path, schedule=["0 3 * * *"])
    daemon = Daemon.start(home, NOW)
    try:
        assert daemon.timer.next_wake() == NOW + timedelta(hours=1) - FIRE_LEAD
        path = home.loops_dir / "app.toml"
        path.write_text(path.read_text().replace('"0 3 * * *"', '"2 2 * * *"'))
        now = NOW + timedelta(minutes=1)
        daemon.reload(now)
        fire = NOW + timedelta(minutes=2)
        assert daemon.timer.next_wake() == fire - FIRE_LEAD
        assert daemon.sleep_for(fire - FIRE_LEAD - 300 * MS) == pytest.approx(0.3)
    finally:
        daemon.stop(NOW + timedelta(minutes=3), grace=0)


def test_a_fire_a_tick_could_not_take_keeps_the_polls_pace(
    tmp_path: Path, no_subreaper: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = home_with(tmp_path, schedule=["*/10 * * * *"])
    daemon = Daemon.start(home, NOW)
    try:
        wake = NOW + timedelta(minutes=10) - FIRE_LEAD

        def broken(now):  # noqa: ANN001, ANN202 - the cursor file cannot be written, say
            raise OSError("disk full")

        monkeypatch.setattr(daemon.timer, "due", broken)
        with pytest.raises(OSError):
            daemon.tick(wake)
        # The fire is still ahead of the timer's cursor: no spin of failing ticks.
        assert daemon.timer.next_wake() == wake
        assert daemon.sleep_for(wake + 5 * MS) == POLL_SECONDS
    finally:
        daemon.stop(NOW + timedelta(minutes=11), grace=0)


def test_loopd_run_prepares_a_fire_ahead_and_starts_its_agent_at_the_second(
    tmp_path: Path, daemons: list
) -> None:
    """A real `loopd run`, a real minute fire: the run is handed out ahead, its agent (in the
    sandbox) starts at the scheduled second, never before it."""
    repo = make_repo(tmp_path / "repo", {"README.md": "x\n"})
    shared, sandbox = talk(tmp_path)
    log = shared / "agent-started"
    script = f"import time; open({str(log)!r}, 'w').write(repr(time.time()))"
    config = (
        f'[agents.a]\nadapter = "command"\n'
        f"command = {json.dumps([sys.executable, '-I', '-S', '-c', script])}\n{sandbox}"
    )
    # The next minute with room for the daemon's start and the lead before it.
    fire = utc_now().replace(second=0, microsecond=0) + timedelta(minutes=1)
    if (fire - utc_now()).total_seconds() < 15:
        fire += timedelta(minutes=1)
    loop = (
        f'repo = "{repo}"\ntask = "t"\nagent = "a"\ntimezone = "UTC"\n'
        f'schedule = ["{fire.minute} {fire.hour} * * *"]\n'
        'max_attempts = 1\nmax_nudges = 0\ncritic = "off"\nskip_if_done = false\n'
    )
    home = make_home(tmp_path / "home", config, {"app": loop})
    daemon = start_daemon(home)
    daemons.append(daemon)
    started = float(wait_for(lambda: log.exists() and log.read_text(), timeout=150, what="agent"))
    assert started >= fire.timestamp()  # let go at its second, not when it was prepared
    (run,) = wait_for(lambda: [r for r in runs(home) if r.get("outcome")], what="the outcome")
    assert run["outcome"] == "succeeded"
    assert run["trigger"]["kind"] == "schedule" and run["trigger"]["not_before"] == fire
    assert run["id"].startswith(f"{fire:%Y%m%dT%H%M%SZ}-app-")
    assert stop_daemon(daemon) == 0


def test_a_run_stopped_while_it_waits_for_its_fire_never_starts_its_agent(
    tmp_path: Path, no_subreaper: None
) -> None:
    """The wall clock stands at the hand-out (injected): the prepared run waits in its gated
    sandbox; a stop then ends it without the agent ever running, though the stop would
    give a running agent time to finish."""
    repo = make_repo(tmp_path / "repo", {"README.md": "x\n"})
    shared, sandbox = talk(tmp_path)
    marker = shared / "agent-ran"
    script = f"open({str(marker)!r}, 'w').write('ran')"
    config = (
        f'[agents.a]\nadapter = "command"\n'
        f"command = {json.dumps([sys.executable, '-I', '-S', '-c', script])}\n{sandbox}"
    )
    loop = (
        f'repo = "{repo}"\ntask = "t"\nagent = "a"\nschedule = ["10 2 * * *"]\n'
        'max_attempts = 1\nmax_nudges = 0\ncritic = "off"\nskip_if_done = false\n'
    )
    home = Home(make_home(tmp_path / "home", config, {"app": loop}))
    wake = NOW + timedelta(minutes=10) - FIRE_LEAD
    daemon = Daemon.start(home, NOW, clock=lambda: wake)
    try:
        daemon.tick(wake)
        worker = wait_for(lambda: daemon.pool.workers.get("app"), what="the run's worker")
        transcripts = home.state_dir / "runs" / worker.run_id

        def held() -> bool:  # the sandbox is up (process started), the agent not let go
            return any('"event": "started"' in t.read_text() for t in transcripts.rglob("*.jsonl"))

        wait_for(held, what="the agent's sandbox, held for the fire")
        worker.executor.interrupt(30)  # a daemon's stop, with its grace
        wait_for(lambda: not worker.thread.is_alive(), what="the run's end")
        assert worker.run.outcome == "interrupted"
        assert worker.run.trigger.not_before == wake + FIRE_LEAD
        assert not marker.exists()
    finally:
        daemon.stop(wake, grace=0)
