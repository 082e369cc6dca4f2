"""The stop token: cancel, interrupt with grace, the cancel file, waits that end early."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from daemon.runs.stop import RunStopped, StopToken


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
