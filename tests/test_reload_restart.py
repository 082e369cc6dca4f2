"""What a reload applies and what waits for a restart: the sandbox in force decides whether
an agent could have changed the configuration; an `[engine]` change is kept for the restart
and said so (the event, `loopd reload`, `loopd status`)."""

from __future__ import annotations

import os

import pytest

from daemon.config import DaemonConfig, SandboxConfig
from daemon.sandbox import bwrap as bwrap_module
from daemon.sandbox.base import Availability
from daemon.service.reload import agent_could_write_home


def probe_found(monkeypatch: pytest.MonkeyPatch, ok: bool) -> None:
    """What the bubblewrap probe found in this process."""
    path = "/usr/bin/bwrap" if ok else ""
    detail = "bubblewrap 0.8.0" if ok else "not installed"
    found = bwrap_module._Found(path, frozenset(), Availability(ok, detail))
    monkeypatch.setitem(bwrap_module._found, os.getpid(), found)


def test_auto_with_bubblewrap_in_force_hides_the_home_from_agents(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    probe_found(monkeypatch, ok=True)
    assert agent_could_write_home(DaemonConfig(sandbox=SandboxConfig(mode="auto"))) is False
    assert agent_could_write_home(DaemonConfig(sandbox=SandboxConfig(mode="bwrap"))) is False
    assert agent_could_write_home(DaemonConfig(sandbox=SandboxConfig(mode="off"))) is True


def test_auto_without_bubblewrap_lets_agents_write_the_home(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    probe_found(monkeypatch, ok=False)
    assert agent_could_write_home(DaemonConfig(sandbox=SandboxConfig(mode="auto"))) is True
