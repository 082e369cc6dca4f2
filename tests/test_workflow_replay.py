"""Every stored workflow history (tests/data/histories/) replays with loopd's workflow classes.

A change to a workflow's code that would make a live worker fail on an in-flight run's history
(a reordered, added or dropped activity, timer or child) fails here first; such a change needs
`workflow.patched` and a newly recorded history (DEVELOPERS.md, "Replayed workflows").
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from temporalio import workflow

from daemon.engine.temporal.controller import Controller, Fire, Home
from daemon.engine.temporal.models import RunInput
from daemon.engine.temporal.runflow import RunWorkflow
from daemon.state.records import RunRecord
from tests.histories import replay, stored


def _types() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in stored():
        entry = json.loads(path.read_text())
        found.setdefault(entry["workflow_type"], []).append(entry["scenario"])
    return found


def test_every_stored_history_replays_without_non_determinism() -> None:
    files = stored()
    # The controller, the run and the home workflow each have histories; the run's from
    # every ending the parity scenarios reach.
    types = _types()
    assert {"Controller", "RunWorkflow", "Home"} <= set(types), types
    assert len(set(types["RunWorkflow"])) >= 5, types
    failures = replay(files)
    assert not failures, "did not replay:\n" + "\n".join(f"{p}: {e}" for p, e in failures.items())


@workflow.defn(name="RunWorkflow", failure_exception_types=[Exception])
class ReorderedRun(RunWorkflow):
    """RunWorkflow with the `checks` activity called ahead of the `setup` step: the kind of
    change that needs `workflow.patched`."""

    @workflow.run
    async def run(self, inp: RunInput) -> RunRecord:
        return await super().run(inp)

    async def _setup(self, inp: Any, cfg: Any, prepared: Any) -> Any:
        # Never run: the replay stops at its command, which the history does not have.
        await workflow.execute_activity("checks", inp, start_to_close_timeout=timedelta(minutes=1))
        return await super()._setup(inp, cfg, prepared)


REORDERED = [Controller, ReorderedRun, Fire, Home]


def _activities(entry: dict[str, Any]) -> list[str]:
    """The activities a stored history scheduled, in order."""
    return [
        event["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for event in entry["history"]["events"]
        if "activityTaskScheduledEventAttributes" in event
    ]


def test_a_reordered_activity_call_fails_the_replay() -> None:
    runs = []
    for path in stored():
        entry = json.loads(path.read_text())
        if entry["workflow_type"] == "RunWorkflow" and "setup" in _activities(entry):
            runs.append(path)
    assert runs, "no stored run history has a setup step"
    failures = replay(runs, "tests.test_workflow_replay:REORDERED")
    assert set(failures) == {str(p) for p in runs}, failures
    assert all("NondeterminismError" in f for f in failures.values()), failures
