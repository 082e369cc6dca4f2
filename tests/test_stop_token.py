"""The stop token: cancel, interrupt with grace, the cancel file, waits that end early."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from daemon.runparts.stop import FINAL_STEP, RunStopped, StopToken, wait_until


def test_wait_returns_early_on_cancel_and_cancel_wins_over_interrupt() -> None:
    token = StopToken()
    assert not token.wait(0.01) and token.why is None
    token.raise_if_stopped()
    timer = threading.Timer(0.05, token.interrupt, args=(30.0,))
    timer.start()
    assert token.wait(600)  # returns when interrupted, not after 600 s
    assert token.why == "interrupted"
    token.cancel()
    token.interrupt(0)
    assert token.cancelled
    with pytest.raises(RunStopped) as caught:
        token.raise_if_stopped()
    assert caught.value.why == "cancelled"


def test_callbacks_hear_the_stop_with_its_grace_even_when_registered_after() -> None:
    token = StopToken()
    heard: list[tuple[float, str]] = []
    with token.on_stop(lambda grace, why: heard.append((grace, why))):
        token.interrupt(10)
        token.interrupt(20)  # a longer grace than the one given changes nothing
        token.interrupt(0)  # a second signal: no grace
    token.cancel()  # outside the block: not heard
    assert heard == [(10, "shutdown"), (0, "shutdown")]
    late: list[tuple[float, str]] = []
    with token.on_stop(lambda grace, why: late.append((grace, why))):
        pass
    assert late == [(0, "cancelled")]


def test_the_cancel_file_reaches_a_wait_and_the_watcher(tmp_path: Path) -> None:
    flag = tmp_path / "cancel"
    token = StopToken(flag.exists, poll=0.01)
    heard = threading.Event()
    token.watch()
    try:
        with token.on_stop(lambda grace, why: heard.set()):
            threading.Timer(0.05, flag.touch).start()
            assert token.wait(600)
            assert heard.wait(600)
    finally:
        token.close()
    assert token.cancelled


class FakeWall:
    """A wall clock moved only by the waits it is given (nothing sleeps)."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.waits: list[float] = []

    def clock(self) -> datetime:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.now += timedelta(seconds=seconds)
        return False


FIRE = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)


def test_wait_until_lets_go_at_the_moment_never_before_it() -> None:
    wall = FakeWall(FIRE - timedelta(seconds=3, milliseconds=250))
    assert wait_until(FIRE, wall.clock, wall.wait, longest=6) == pytest.approx(3.25)
    # Short of the moment first, then one step of FINAL_STEP to it.
    assert wall.waits == [pytest.approx(3.25 - FINAL_STEP), pytest.approx(FINAL_STEP)]
    assert wall.now == FIRE
    # Already past: no wait at all.
    assert wait_until(FIRE, wall.clock, wall.wait, longest=6) == 0.0
    assert len(wall.waits) == 2


def test_wait_until_is_bounded_and_ends_early_when_stopped() -> None:
    wall = FakeWall(FIRE - timedelta(hours=1))  # a moment far ahead: a clock set back
    assert wait_until(FIRE, wall.clock, wall.wait, longest=6) == 6.0
    assert wall.now == FIRE - timedelta(hours=1) + timedelta(seconds=6)
    stopped: list[float] = []

    def stop_at_once(seconds: float) -> bool:
        stopped.append(seconds)
        return True

    assert wait_until(FIRE, wall.clock, stop_at_once, longest=6) == 6.0
    assert len(stopped) == 1  # a stop ends the wait: the run's stop takes over
