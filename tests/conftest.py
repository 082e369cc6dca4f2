"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.model_server import ScriptedModelServer


@pytest.fixture
def model_server() -> Iterator[ScriptedModelServer]:
    """A started scripted OpenAI-compatible server on 127.0.0.1; give it replies with `.add`."""
    server = ScriptedModelServer()
    with server:
        yield server
