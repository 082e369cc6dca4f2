"""What a starting daemon does with a run a dead loopd left live: resume, retry, or end it.

One broken run never stops the others: whatever goes wrong recovering it is recorded
(`run_recovery_failed`) and the run is ended as well as it can be.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from daemon.config import Loop
from daemon.runparts import decisions
from daemon.runparts.services import RunServices
from daemon.state.eventtypes import Event
from daemon.state.records import Cause, RunRecord, Trigger, is_experiment

Action = Literal["resume", "retry", "ended", "skip"]


@dataclass
class Recovery:
    """The decision for one live run.

    - `resume`: its agent was done, or it is parked on a usage limit; launch an executor
      on `run` (it resumes judging, or the park);
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
    """Decide (and do the ending part of) what happens to the live run `run_id`; never raises."""
    store = services.store
    try:
        run = store.load_run(run_id)
    except Exception as exc:  # noqa: BLE001 - a record we cannot read cannot be resumed
        _failed(services, run_id, None, f"run.toml is unreadable: {exc}")
        store.unmark_live(run_id)
        return Recovery(run_id, "ended")
    try:
        return _recover(services, loops, run, now)
    except Exception as exc:  # noqa: BLE001 - one broken run must not stop the daemon's start
        _failed(services, run_id, run, f"{type(exc).__name__}: {exc}")
        return _end_anyhow(services, run)


def _recover(
    services: RunServices, loops: Mapping[str, Loop], run: RunRecord, now: datetime
) -> Recovery:
    from daemon.runs.finish import (
        complete_finish,
        end_without_agent,
        finish_interrupted,
        kill_run_leftovers,
    )

    store = services.store
    loop = loops.get(run.loop)
    if store.loop_lock(run.loop).is_held():
        return Recovery(run.id, "skip", run)  # `loopd once` is running it
    if run.outcome is not None:
        # Its loopd died while finishing it: do what finishing had not done yet.
        notify_on = loop.config.notify_on if loop is not None else None
        config = loop.config if loop is not None else None
        complete_finish(services, run, notify_on=notify_on, config=config)
        return Recovery(run.id, "ended", run)
    kill_run_leftovers(services, run)
    if loop is None:
        end_without_agent(
            services,
            run,
            "interrupted",
            "loopd stopped during the run; the loop file is no longer valid",
        )
        return Recovery(run.id, "ended", run)
    if is_experiment(run):
        # Its experiment ended with the loopd that ran it: neither resumed nor retried.
        reason = "the loopd experiment that ran it was stopped or killed"
        finish_interrupted(services, loop, run, reason)
        return Recovery(run.id, "ended", run)
    ending = decisions.left_live(run)
    if ending is None:
        # Its agent was done (judging resumes), or it is parked on a usage limit: it stays
        # parked (its tree where it was) and resumes the same session once the limit lifts.
        services.event(Event.RUN_RECOVERED, loop=run.loop, run=run.id, to=_resumes_in(run))
        return Recovery(run.id, "resume", run)
    run = finish_interrupted(services, loop, run, ending.reason, ending.cause)
    if not decisions.retried(ending):
        return Recovery(run.id, "ended", run)  # retried once already: a person looks at it
    retry = Trigger(
        loop=run.loop,
        kind="retry",
        reason=f"retry of interrupted run {run.id}",
        retry_of=run.id,
        ts=now,
    )
    return Recovery(run.id, "retry", run, retry)


def _resumes_in(run: RunRecord) -> Literal["judging", "waiting"]:
    return "waiting" if run.phase == "waiting" else "judging"


def _failed(services: RunServices, run_id: str, run: RunRecord | None, error: str) -> None:
    try:
        services.event(
            Event.RUN_RECOVERY_FAILED,
            loop=run.loop if run else None,
            run=run_id,
            error=error[:1000],
        )
    except Exception:  # noqa: BLE001 - the event log itself may be what is broken
        pass


def _end_anyhow(services: RunServices, run: RunRecord) -> Recovery:
    """End a run whose recovery failed: as `error` when that works, else just unmark it."""
    from daemon.runs.finish import end_without_agent

    try:
        if run.outcome is None:
            run.outcome = "error"
            run.reason = "loopd could not recover this run after a restart"
            run.cause = Cause.LOOPD_ERROR
            run.finished = services.clock()
            run.phase = "idle"
            services.store.save_run(run)
        end_without_agent(services, run, "error", run.reason)
    except Exception as exc:  # noqa: BLE001 - nothing more can be done here
        _failed(services, run.id, run, f"ending it failed too: {type(exc).__name__}: {exc}")
        services.store.unmark_live(run.id)
    return Recovery(run.id, "ended", run)
