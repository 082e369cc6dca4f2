"""Shared fixtures."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.model_server import ScriptedModelServer


@pytest.fixture(autouse=True)
def _reap_orphans() -> Iterator[None]:
    """Reap zombies reparented to the test process.

    Once a test has run a supervisor in process, pytest is a child subreaper: an agent that a
    killed `loopd` subprocess left behind becomes pytest's child, and its zombie would show up
    in a later test that counts our zombies.
    """
    yield
    from daemon.agents.processes import reap_orphans

    reap_orphans()


@pytest.fixture
def model_server() -> Iterator[ScriptedModelServer]:
    """A started scripted OpenAI-compatible server on 127.0.0.1; give it replies with `.add`."""
    server = ScriptedModelServer()
    with server:
        yield server


@pytest.fixture
def daemons() -> Iterator[list[subprocess.Popen[str]]]:
    """`loopd run` processes a test started; any still running at the end are killed."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- the checkout's own home is never used by a test --------------------------------------------

_STATE_KEY = pytest.StashKey[list]()

_CHECKOUT_STATE = Path(__file__).resolve().parent.parent / "state"


def _checkout_state() -> list[tuple[str, int, int]]:
    """What the checkout's state/ holds (path, size, mtime), to compare before and after."""
    out = []
    for path in sorted(_CHECKOUT_STATE.rglob("*"))[:20000] if _CHECKOUT_STATE.exists() else []:
        try:
            st = path.stat()
        except OSError:
            continue
        out.append((str(path.relative_to(_CHECKOUT_STATE)), st.st_size, st.st_mtime_ns))
    return out


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_STATE_KEY] = _checkout_state()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Tests use homes in temporary folders: one that wrote into the checkout's state/ (the
    checkout is a home with an enabled example loop) fails the session."""
    before = session.config.stash.get(_STATE_KEY, None)
    if before is None:
        return
    after = _checkout_state()
    if after != before:
        changed = sorted({p for p, *_ in after} ^ {p for p, *_ in before}) or ["(files changed)"]
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = (
            "a test used the checkout's own home: its state/ changed during the session: "
            + ", ".join(changed[:10])
        )
        if reporter is not None:
            reporter.write_line(message, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
