"""What a starting daemon does with a run a dead loopd left live: resume, retry, or end it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from daemon.config import Loop
from daemon.runs.services import RunServices
from daemon.state.records import RunRecord, Trigger

Action = Literal["resume", "retry", "ended", "skip"]


@dataclass
class Recovery:
    """The decision for one live run.

    - `resume`: its agent was done; launch an executor on `run` (it resumes judging);
    - `retry`: it was ended `interrupted`; offer `retry_trigger`;
    - `ended`: nothing more to do;
    - `skip`: another process (`loopd once`) runs it now.
    """

    run_id: str
    action: Action
    run: RunRecord | None = None
    retry_trigger: Trigger | None = None


def recover_run(
    services: RunServices, loops: Mapping[str, Loop], run_id: str, now: datetime
) -> Recovery:
    """Decide (and do the ending part of) what happens to the live run `run_id`."""
    from daemon.runs.executor import end_without_agent, finish_interrupted, kill_run_leftovers

    store = services.store
    try:
        run = store.load_run(run_id)
    except Exception:  # noqa: BLE001 - a record we cannot read cannot be resumed
        store.unmark_live(run_id)
        return Recovery(run_id, "ended")
    if run.outcome is not None:
        store.unmark_live(run_id)
        return Recovery(run_id, "ended", run)
    if store.loop_lock(run.loop).is_held():
        return Recovery(run_id, "skip", run)  # `loopd once` is running it
    loop = loops.get(run.loop)
    kill_run_leftovers(services, run)
    if loop is None:
        end_without_agent(
            services,
            run,
            "interrupted",
            "loopd stopped during the run; the loop file is no longer valid",
        )
        return Recovery(run_id, "ended", run)
    if run.phase in ("judging", "learning") and run.attempts and run.attempts[-1].finished:
        services.event("run_recovered", loop=run.loop, run=run.id, to="judging")
        return Recovery(run_id, "resume", run)
    run = finish_interrupted(
        services, loop, run, "loopd stopped during the run (crash, kill or reboot)"
    )
    if run.trigger.kind == "retry":
        return Recovery(run_id, "ended", run)
    retry = Trigger(
        loop=run.loop,
        kind="retry",
        reason=f"retry of interrupted run {run.id}",
        retry_of=run.id,
        ts=now,
    )
    return Recovery(run_id, "retry", run, retry)
