"""glibc's allocator settings for the long-lived daemon (#41's RSS creep)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.allocator import Trimmer


def test_the_arena_limit_is_taken_on_glibc() -> None:
    # In a child: the limit holds for the whole process, and the tests' process keeps its own.
    code = "from daemon.allocator import limit_arenas; print(limit_arenas(2))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "True"


def test_a_trim_after_runs_at_most_once_a_minute() -> None:
    trimmer = Trimmer(every=60.0)
    assert trimmer.after_runs(1000.0) is True
    assert trimmer.after_runs(1030.0) is False
    assert trimmer.after_runs(1059.9) is False
    assert trimmer.after_runs(1060.0) is True


class _Engine:
    """An engine whose serve and work only say they were reached."""

    def serve(self) -> int:
        return 7

    def work(self, queue: str | None, metrics: str | None) -> int:
        return 8


def test_the_temporal_engines_processes_take_the_arena_limit_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `loopd run` under another engine and `loopd worker` never reach run_daemon: they take
    # the limit themselves, before the engine's threads start.
    from daemon.cli import daemon as daemon_cli
    from daemon.cli import worker as worker_cli

    (tmp_path / "loopd.toml").write_text("")
    taken: list[str] = []
    for module in (daemon_cli, worker_cli):
        monkeypatch.setattr(module, "limit_arenas", lambda m=module.__name__: taken.append(m))
        monkeypatch.setattr(module, "engine_for", lambda _home: _Engine())
    monkeypatch.setattr(daemon_cli, "engine_control", lambda _home: "temporal")
    args = argparse.Namespace(home=str(tmp_path), queue=None, metrics=None)
    assert daemon_cli.run(args) == 7
    assert worker_cli.worker(args) == 8
    assert taken == ["daemon.cli.daemon", "daemon.cli.worker"]
