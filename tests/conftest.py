"""Shared fixtures."""

from __future__ import annotations

import ctypes
import os
import subprocess
from collections.abc import Iterator

import pytest

from tests.model_server import ScriptedModelServer

PR_SET_CHILD_SUBREAPER = 36


@pytest.fixture(autouse=True)
def _reap_orphans() -> Iterator[None]:
    """Reap zombies reparented to the test process.

    Once a test has run a supervisor in process, pytest is a child subreaper: an agent that a
    killed `loopd` subprocess left behind becomes pytest's child, and its zombie would show up
    in a later test that counts our zombies.
    """
    yield
    import daemon.agents.processes as processes

    processes.reap_orphans()
    # Nor may a later test inherit the subreaper: orphans of its git hooks, in pytest's own
    # session, would become zombies nobody reaps (and fail the tests that count them).
    if processes._subreaper_for_pid == os.getpid():
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        processes._subreaper_for_pid = None


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
