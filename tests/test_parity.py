"""The same scenarios on both engines, their run records compared field by field.

Each test makes two machines, one on the local engine and one on Temporal, drives both through
the same commands, and compares what each home's run.toml files say (tests/parity.py leaves
out ids, times, paths and pids).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.machines import Machine, engine_toml
from tests.parity import comparable, differences
from tests.test_engines import FIX, machines, make_machine, script_agent
from tests.test_lifecycle import settled

__all__ = ["machines"]  # a fixture, imported for pytest


def on_both(
    tmp_path: Path,
    temporal: Any,
    machines: list,
    agent: str,
    scenario: Callable[[Machine], int],
    config: str = "",
    **loop: Any,
) -> list[dict[str, Any]]:
    """Run `scenario` (which returns how many runs it makes) on a local and a Temporal
    machine; fail on any field where their run records differ; the local records."""
    server, namespace = temporal
    found = {}
    for kind in ("local", "temporal"):
        engine = engine_toml(server.address, namespace) if kind == "temporal" else ""
        machine = make_machine(tmp_path / kind, engine, agent, config, **loop)
        machines.append(machine)
        count = scenario(machine)
        wait_for_settled(machine, count)
        found[kind] = comparable(machine)
        assert machine.stop() == 0
    local, other = found["local"], found["temporal"]
    assert len(local) == len(other), (local, other)
    diff = differences(local, other)
    assert not diff, "local != temporal:\n" + "\n".join(diff)
    return local


def wait_for_settled(machine: Machine, count: int) -> None:
    from tests.helpers import wait_for

    wait_for(lambda: settled(machine, count), timeout=120, what=f"{count} runs finished")


def test_a_passing_run_is_recorded_alike(tmp_path: Path, temporal: Any, machines: list) -> None:
    def scenario(machine: Machine) -> int:
        machine.start("run")
        assert machine.loopd("trigger", "calc", "--wait").returncode == 0
        return 1

    (run,) = on_both(tmp_path, temporal, machines, script_agent(FIX), scenario)
    assert run["outcome"] == "succeeded"
