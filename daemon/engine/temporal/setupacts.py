"""The home's record of a run's `setup` and done check, which a worker ran before the first
attempt: the logs' tails in the home's `state/runs/RUN_ID/`, the events, and whether the run
is done already (`skipped`, as the local engine decides it)."""

from __future__ import annotations

from typing import Any

from temporalio import activity

from daemon.engine.temporal.homeside import HomeSide
from daemon.engine.temporal.models import EndOfRun, Prepared, SetupEnded
from daemon.runparts.setup import DONE_LOG, SETUP_LOG, already_done_reason
from daemon.state.atomic import write_atomic
from daemon.state.eventtypes import Event
from daemon.state.records import Cause


class SetupActivities:
    """The home's side of a run's setup."""

    def __init__(self, side: HomeSide) -> None:
        self.side = side

    def activities(self) -> list[Any]:
        return [self.setup_ended]

    @activity.defn(name="setup_ended")
    def setup_ended(self, inp: SetupEnded) -> Prepared:
        """Record what the worker's setup and done check said; a run done already ends."""
        services, journal = self.side.open_run(inp.ref)
        run, out = journal.run, inp.output
        folder = services.store.run_dir(run.id)
        if out.setup_log:
            write_atomic(folder / SETUP_LOG, out.setup_log)
            journal.event(Event.SETUP_FINISHED, passed=True, worker=out.worker)
        if not out.done_checked:
            return Prepared()
        run.base_tests = list(out.base_tests)
        run.base_failures = list(out.base_failures)
        journal.save()
        write_atomic(folder / DONE_LOG, out.done_log)
        journal.event(
            Event.DONE_CHECK,
            passed=out.done_passed,
            commit=run.base_commit,
            results=out.results,
            worker=out.worker,
        )
        if out.environment:
            ended = EndOfRun(outcome="escalated", reason=out.environment, cause=Cause.ENVIRONMENT)
            return Prepared(ended=ended)
        if not out.done_passed:
            return Prepared()
        reason = already_done_reason(run.base_commit)
        return Prepared(ended=EndOfRun(outcome="skipped", reason=reason, cause=Cause.ALREADY_DONE))
