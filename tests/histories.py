"""Stored Temporal workflow histories: recorded from the parity scenarios, replayed in the tests.

`LOOPD_RECORD_HISTORIES=1` on tests/test_parity.py (or `python -m tests.record_histories`)
writes, after each scenario's Temporal machine has settled, the history of every workflow in
its namespace to `tests/data/histories/SET/SCENARIO--TYPE-N.json` (SET: the day's date, or
`LOOPD_HISTORIES_SET`), so a new recording never overwrites the ones in-flight runs may still
have. `replay()` runs every stored history through `temporalio.worker.Replayer` with loopd's
workflow classes: no server is needed.

Both run in a child process (`python -m tests.histories fetch|replay`): the test process keeps
no Temporal runtime of its own (tests/temporal_server.py says why).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HISTORIES = ROOT / "tests" / "data" / "histories"
WORKFLOWS = "daemon.engine.temporal.controller:WORKFLOWS"


def recording() -> bool:
    """Whether the parity tests record their histories (LOOPD_RECORD_HISTORIES=1)."""
    return os.environ.get("LOOPD_RECORD_HISTORIES") == "1"


def history_set() -> Path:
    """Where this recording goes: one folder per set, never an older set's."""
    name = os.environ.get("LOOPD_HISTORIES_SET") or datetime.now(UTC).strftime("%Y-%m-%d")
    return HISTORIES / name


def stored() -> list[Path]:
    """Every stored history, in a stable order."""
    return sorted(HISTORIES.rglob("*.json"))


def record(address: str, namespace: str, scenario: str) -> list[Path]:
    """The histories of every workflow in `namespace`, written under this set's folder."""
    out = _child("fetch", address, namespace, scenario, str(history_set()))
    return [Path(line) for line in out.splitlines() if line]


def replay(files: list[Path], workflows: str = WORKFLOWS) -> dict[str, str]:
    """Replay `files` with the workflow classes at `workflows` (module:attribute); the
    failure of each file that did not replay, by path ({} when all did)."""
    out = _child("replay", workflows, *map(str, files))
    return json.loads(out.splitlines()[-1])


def _child(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.histories", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"tests.histories {args[0]} failed:\n{proc.stderr[-4000:]}")
    return proc.stdout


async def _fetch(address: str, namespace: str, scenario: str, folder: Path) -> list[Path]:
    from temporalio.client import Client

    client = await Client.connect(address, namespace=namespace)
    found = [wf async for wf in client.list_workflows("")]
    found.sort(key=lambda wf: (wf.start_time, wf.id))
    folder.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    written = []
    for wf in found:
        history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
        counts[wf.workflow_type] = n = counts.get(wf.workflow_type, 0) + 1
        path = folder / f"{scenario}--{wf.workflow_type}-{n}.json"
        entry = {
            "scenario": scenario,
            "workflow_id": wf.id,
            "workflow_type": wf.workflow_type,
            "status": wf.status.name if wf.status else "",
            "history": json.loads(history.to_json()),
        }
        path.write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n")
        written.append(path)
    return written


def load(path: Path) -> Any:
    """One stored file as the SDK's WorkflowHistory."""
    from temporalio.client import WorkflowHistory

    entry = json.loads(path.read_text())
    return WorkflowHistory.from_json(entry["workflow_id"], entry["history"])


async def _replay(workflows: str, files: list[Path]) -> dict[str, str]:
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.worker import Replayer
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    _nondeterminism_is_reported()
    module, attribute = workflows.split(":")
    classes = getattr(importlib.import_module(module), attribute)
    # As the home's worker runs them (engine/temporal/service.py): the same converter and sandbox.
    replayer = Replayer(
        workflows=classes,
        data_converter=pydantic_data_converter,
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("daemon", "tests")
        ),
    )
    failures = {}
    for path in files:
        result = await replayer.replay_workflow(load(path), raise_on_replay_failure=False)
        if result.replay_failure is not None:
            failures[str(path)] = f"{type(result.replay_failure).__name__}: {result.replay_failure}"
    return failures


def _nondeterminism_is_reported() -> None:
    """Make the replay report a non-determinism instead of failing the workflow.

    loopd's workflows declare `failure_exception_types=[Exception]`, which includes the SDK's
    NondeterminismError: a live worker then fails the workflow (the run ends in error), and
    the Replayer, which waits for the cache eviction that a non-determinism causes, would wait
    forever. The SDK has no option for this, so its private per-type list is emptied here.
    """
    from temporalio.worker._workflow import _WorkflowWorker

    _WorkflowWorker.nondeterminism_as_workflow_fail_for_types = lambda self: set()  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    if argv[0] == "fetch":
        address, namespace, scenario, folder = argv[1:]
        for path in asyncio.run(_fetch(address, namespace, scenario, Path(folder))):
            print(path)
    elif argv[0] == "replay":
        print(json.dumps(asyncio.run(_replay(argv[1], [Path(a) for a in argv[2:]]))))
    else:
        print(
            f"usage: python -m tests.histories fetch|replay ...; not {argv[0]!r}", file=sys.stderr
        )
        return 2
    sys.stdout.flush()
    os._exit(0)  # the SDK's runtime threads need not be waited for


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
