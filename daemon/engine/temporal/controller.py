"""The loop's controller (`loopd/LOOP`), the Fire a Schedule starts, and the home workflow.

The controller receives every trigger of its loop (signals; a Schedule's Fire signals it too)
and starts the loop's runs one at a time as child workflows (`loopd/LOOP/RUN_ID`). What to do
with a trigger (filters, `overlap`, `max_queued`, `catch_up`) the home's `intake` activity
decides, with the local engine's own code.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from daemon.engine.temporal.models import (
        ROUTED_KEPT,
        Admitted,
        CancelQueued,
        ControllerState,
        ControllerView,
        IntakeInput,
        IntakeResult,
        PauseInput,
        RunSummary,
        TriggerBatch,
    )
    from daemon.engine.temporal.names import controller_id, run_workflow_id
    from daemon.engine.temporal.runflow import LOCAL, RunWorkflow
    from daemon.runparts import decisions
    from daemon.state.queuefile import PendingRun
    from daemon.state.records import Cause, RunRecord, Trigger

SCHEDULED_AT = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")
BATCH = 1000  # triggers one intake takes


@workflow.defn(name="Controller", failure_exception_types=[Exception])
class Controller:
    """One per loop (`loopd/LOOP`): every trigger comes here; it starts the loop's runs."""

    @workflow.init
    def __init__(self, state: ControllerState) -> None:
        self.st = state
        self.running = ""
        self.finished: list[RunSummary] = []
        self.pauses: list[bool] = []
        self.cancels: list[str] = []
        self.held = False  # a usage limit or a spent budget holds new runs (a timer ends it)
        self.hold: tuple[str, datetime | None] = ("", None)  # why, until when

    @workflow.signal(name="trigger")
    def trigger(self, batch: TriggerBatch) -> None:
        self.st.waiting.extend(batch.triggers)

    @workflow.signal(name="pause")
    def pause(self, paused: bool) -> None:
        self.pauses.append(paused)

    @workflow.signal(name="cancel")
    def cancel(self, run_id: str) -> None:
        self.cancels.append(run_id)

    @workflow.query(name="status")
    def status(self) -> ControllerView:
        return ControllerView(
            loop=self.st.loop,
            paused=self.st.paused,
            running=self.running,
            pending=[p.id for p in self.st.pending],
            last_run=self.st.last_run,
            last_outcome=self.st.last_outcome,
            routed=self.st.routed,
            held_why=self.hold[0] if self.held else "",
            held_until=self.hold[1] if self.held else None,
        )

    def _startable(self) -> bool:
        return not self.running and bool(self.st.pending) and not self.st.paused and not self.held

    def _has_work(self) -> bool:
        idle = not self.running and not self.st.waiting
        renew = idle and workflow.info().is_continue_as_new_suggested()
        return bool(
            self.st.waiting
            or self.pauses
            or self.cancels
            or self.finished
            or self._startable()
            or renew
        )

    async def _local(self, name: str, arg: Any, result_type: type | None = None) -> Any:
        return await workflow.execute_local_activity(name, arg, result_type=result_type, **LOCAL)

    @workflow.run
    async def run(self, state: ControllerState) -> None:
        st = self.st
        while True:
            await workflow.wait_condition(self._has_work)
            while self.pauses:
                st.paused = self.pauses.pop(0)
                await self._local("set_paused", PauseInput(loop=st.loop, paused=st.paused))
            if st.waiting:
                batch, st.waiting = st.waiting[:BATCH], st.waiting[BATCH:]
                result: IntakeResult = await self._local(
                    "intake",
                    IntakeInput(
                        loop=st.loop, triggers=batch, pending=st.pending, running=self.running
                    ),
                    IntakeResult,
                )
                st.pending = result.pending
                st.routed.update(result.routed)
                for key in list(st.routed)[: max(0, len(st.routed) - ROUTED_KEPT)]:
                    del st.routed[key]
            if self.cancels:
                wanted, self.cancels = set(self.cancels), []
                dropped = [p for p in st.pending if p.id in wanted]
                if dropped:
                    st.pending = [p for p in st.pending if p.id not in wanted]
                    await self._local("cancel_queued", CancelQueued(loop=st.loop, pending=dropped))
            while self.finished:
                self._ended(self.finished.pop(0))
            if self._startable():
                await self._start(st.pending.pop(0))
            elif (
                not self.running
                and not st.waiting
                and workflow.info().is_continue_as_new_suggested()
            ):
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(st)

    def _ended(self, summary: RunSummary) -> None:
        st = self.st
        self.running = ""
        st.last_run, st.last_outcome = summary.run_id, summary.outcome
        if summary.retry:
            # An interrupted run is retried once, as the local engine does after a crash.
            st.waiting.insert(
                0,
                Trigger(
                    loop=st.loop,
                    kind="retry",
                    reason=f"retry of interrupted run {summary.run_id}",
                    retry_of=summary.run_id,
                    ts=workflow.now(),
                    id=f"retry-{summary.run_id}",
                ),
            )

    async def _start(self, pending: PendingRun) -> None:
        admitted: Admitted = await self._local("admit", pending, Admitted)
        if admitted.held_until is not None:
            self.st.pending.insert(0, pending)
            self.held, self.hold = True, (admitted.held_why, admitted.held_until)
            asyncio.ensure_future(self._hold(admitted.held_until - workflow.now()))
            return
        if admitted.input is None:
            return
        inp = admitted.input
        self.running = pending.id
        handle = await workflow.start_child_workflow(
            RunWorkflow.run,
            inp,
            id=run_workflow_id(self.st.loop, pending.id),
            task_queue=workflow.info().task_queue,
            parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            memo={
                "loop": self.st.loop,
                "run": pending.id,
                "trigger": pending.trigger.kind,
                "reason": pending.trigger.reason[:300],
                "merged": pending.merged_count,
                "queue": inp.queue,
            },
        )
        asyncio.ensure_future(self._watch(handle, pending.id, inp.trigger_kind))

    async def _hold(self, delay: Any) -> None:
        """New runs wait until the hold ends (a durable timer), then admission is asked again."""
        if delay.total_seconds() > 0:
            await workflow.sleep(delay)
        self.held = False

    async def _watch(self, handle: Any, run_id: str, kind: str) -> None:
        try:
            record: RunRecord = await handle
            outcome, cause = record.outcome or "error", record.cause
        except ChildWorkflowError:
            outcome, cause = "error", Cause.LOOPD_ERROR
        ending = decisions.Ending(outcome, "", cause or Cause.LOOPD_ERROR)
        self.finished.append(
            RunSummary(
                run_id=run_id,
                outcome=outcome,
                cause=str(cause or ""),
                retry=decisions.retried(ending),
                trigger_kind=kind,
            )
        )


@workflow.defn(name="Fire", failure_exception_types=[Exception])
class Fire:
    """What a loop's Schedule starts: it signals the loop's controller with the fire's time."""

    @workflow.run
    async def run(self, loop: str) -> None:
        info = workflow.info()
        due = info.typed_search_attributes.get(SCHEDULED_AT) or workflow.now()
        fire = Trigger(loop=loop, kind="schedule", ts=due, id=f"fire:{info.workflow_id}")
        batch = TriggerBatch(triggers=[fire])
        try:
            await workflow.get_external_workflow_handle(controller_id(loop)).signal(
                "trigger", batch
            )
        except Exception:  # noqa: BLE001 - the controller is not running: start it with the fire
            await workflow.execute_local_activity("signal_controller", batch, **LOCAL)


@workflow.defn(name="Home", failure_exception_types=[Exception])
class Home:
    """`loopd/.home`: answers for the home's state to commands on other machines."""

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(
            lambda: (
                workflow.info().is_continue_as_new_suggested() and workflow.all_handlers_finished()
            )
        )
        workflow.continue_as_new()

    @workflow.update(name="escalations")
    async def escalations(self, request: dict[str, Any]) -> dict[str, Any]:
        return await workflow.execute_local_activity(
            "escalations", request, result_type=dict, **LOCAL
        )


WORKFLOWS = [Controller, RunWorkflow, Fire, Home]
