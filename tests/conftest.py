"""Shared fixtures."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.model_server import ScriptedModelServer


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
