"""What a reload applies and what waits for a restart: the sandbox in force decides whether
an agent could have changed the configuration; an `[engine]` change is kept for the restart
and said so (the event, `loopd reload`, `loopd status`)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from daemon.config import DaemonConfig, SandboxConfig
from daemon.sandbox import bwrap as bwrap_module
from daemon.sandbox.base import Availability
from daemon.service.reload import (
    agent_could_write_home,
    keep_running,
    restart_messages,
    restart_pending,
)
from tests.helpers import (
    daemon_log,
    events,
    loopd,
    make_home,
    make_repo,
    runs,
    start_daemon,
    stop_daemon,
)

BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5\n",
}
FIXER = (
    "import pathlib; p = pathlib.Path('calc.py'); "
    "p.write_text(p.read_text().replace('a - b', 'a + b'))"
)


def agent_config() -> str:
    command = json.dumps([sys.executable, "-c", FIXER])
    return f'[agents.fixer]\nadapter = "command"\ncommand = {command}\n'


def loop_text(repo: Path) -> str:
    return (
        f'repo = "{repo}"\ntask = "Make check.py pass."\nagent = "fixer"\n'
        'done_when = ["python3 check.py"]\nmax_nudges = 0\nmax_attempts = 1\n'
    )


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


def test_restart_pending_names_each_changed_key_and_the_running_engine_is_kept() -> None:
    running = DaemonConfig()
    written = DaemonConfig.model_validate(
        {"engine": {"kind": "temporal", "address": "10.0.0.2:7233"}, "limits": {"retain_days": 3}}
    )
    pending = restart_pending(running, written)
    assert pending == {"engine": ["kind", "address"]}
    (line,) = restart_messages(pending)
    assert line.startswith("the [engine] change takes effect when loopd restarts")
    assert "kind, address" in line
    kept = keep_running(running, written)
    assert kept.engine.kind == "local" and kept.limits.retain_days == 3  # the rest applies
    assert restart_pending(running, kept) == {}


def test_an_engine_change_waits_for_the_restart_and_reload_and_status_say_so(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home", agent_config(), {"calc": loop_text(repo)})
    daemon = start_daemon(home)
    daemons.append(daemon)
    config = home / "loopd.toml"
    original = config.read_text()
    config.write_text(original + '\n[engine]\nkind = "temporal"\naddress = "127.0.0.1:9"\n')
    proc = loopd(home, "reload")
    assert proc.returncode == 0, proc.stdout + proc.stderr + daemon_log(home)
    assert "the [engine] change takes effect when loopd restarts" in proc.stdout
    assert "changed: kind, address" in proc.stdout
    (needed,) = [e for e in events(home) if e["type"] == "restart_needed"]  # once, not per reload
    assert "[engine]" in needed["changes"][0]
    text = loopd(home, "status", env={"COLUMNS": "300"}).stdout
    assert "warning: the [engine] change takes effect when loopd restarts" in text
    # The daemon keeps serving the local engine, and the commands act on it.
    proc = loopd(home, "trigger", "calc", "--wait", timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr + daemon_log(home)
    assert [r["outcome"] for r in runs(home)] == ["succeeded"]
    # Written back: nothing waits for a restart any more.
    config.write_text(original)
    proc = loopd(home, "reload")
    assert proc.returncode == 0 and "restarts" not in proc.stdout
    warnings = loopd_json(home, "status")["daemon"]["warnings"]
    assert not any("restarts" in w for w in warnings)
    assert stop_daemon(daemon) == 0


def loopd_json(home: Path, *args: str) -> dict:
    proc = loopd(home, *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_temporal_home_keeps_its_engine_section_until_it_restarts(tmp_path: Path) -> None:
    from daemon.engine.temporal.homeside import Configured
    from daemon.home import Home

    home = Home(make_home(tmp_path / "home", '[engine]\nkind = "temporal"\ntask_queue = "a"\n'))
    side = Configured(home, home.load())
    text = home.config_path.read_text().replace('task_queue = "a"', 'task_queue = "b"')
    home.config_path.write_text(text + '\n[notify]\ncommand = ["true"]\n')
    loaded = side.config()
    # Its workers poll queue "a": a controller started on "b" would never run.
    assert loaded.daemon.engine.task_queue == "a" and loaded.daemon.notify.command == ["true"]
    (line,) = side.restart
    assert "the [engine] change takes effect when loopd restarts" in line
    assert "task_queue" in line
