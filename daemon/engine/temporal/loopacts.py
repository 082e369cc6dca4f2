"""The home's steps for a loop's controller, and the escalations it answers for other machines.

Intake is the local engine's own (daemon/service/intake.py): the same filters (push branches,
disabled loops, open escalations), the same overlap policy and the same events, applied to
the controller's pending runs. A schedule's fire arrives with the time it was due: handled
within a minute it is a `schedule` trigger, later but within `catch_up` a `catch-up`, and
older (or already followed by a later fire) a `schedule_missed` event.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from temporalio import activity

from daemon.clock import utc_now
from daemon.config import Loop
from daemon.engine.temporal.homeside import HomeSide
from daemon.engine.temporal.models import (
    CancelQueued,
    ControllerState,
    IntakeInput,
    IntakeResult,
    PauseInput,
    TriggerBatch,
)
from daemon.engine.temporal.names import HOME_WORKFLOW_ID, controller_id
from daemon.people.escalation import (
    AlreadyResolved,
    EscalationNotFound,
    list_escalations,
    load_escalation,
    resolve,
)
from daemon.scheduling.cron import Schedule
from daemon.scheduling.queue import RunQueue
from daemon.scheduling.timer import LATE_GRACE
from daemon.service.context import Context, Flags
from daemon.service.intake import Intake
from daemon.state.events import iso
from daemon.state.eventtypes import Event
from daemon.state.records import Trigger, make_run_id

FIRE = "fire:"  # the id prefix of a schedule's fire


def _queue_class() -> type:
    class Recording(RunQueue):
        """The run queue, remembering its last decision (which run holds the trigger)."""

        last: Any = None

        def offer(self, trigger: Trigger, config: Any, now: datetime) -> Any:
            self.last = super().offer(trigger, config, now)
            return self.last

    return Recording


class _Skips:
    """The event log, remembering why the last trigger was skipped."""

    def __init__(self, events: Any) -> None:
        self._events = events
        self.why = ""

    def append(self, type: Event, ts: datetime, **fields: Any) -> Any:
        if type == Event.TRIGGER_SKIPPED:
            self.why = str(fields.get("why", ""))
        return self._events.append(type, ts, **fields)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._events, name)


class _WithEvents:
    """A state store whose event log is `events`."""

    def __init__(self, store: Any, events: _Skips) -> None:
        self._store = store
        self.events = events

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class LoopActivities:
    """Controller and home-workflow activities of one home."""

    def __init__(self, side: HomeSide) -> None:
        self.side = side

    def activities(self) -> list[Any]:
        return [
            self.intake,
            self.set_paused,
            self.cancel_queued,
            self.signal_controller,
            self.escalations,
        ]

    # intake ----------------------------------------------------------------------------------
    @activity.defn(name="intake")
    def intake(self, inp: IntakeInput) -> IntakeResult:
        """Triggers through the filters and the loop's overlap policy into its pending runs."""
        side = self.side
        side.check_controller(inp.loop)
        store = side.store

        def new_id(loop: str, now: datetime, bump: int) -> str:
            while True:
                run_id = make_run_id(loop, now, bump)
                if not store.run_dir(run_id).exists():
                    return run_id
                bump += 1

        queue = _queue_class()(new_id=new_id)
        for pending in inp.pending:
            queue.restore(pending)
        if inp.running:
            queue.started(inp.loop, inp.running)
        events = _Skips(store.events)
        ctx = Context(
            home=side.home,
            # The type: ignore below: a StateStore in all but its event log, which _WithEvents swaps
            # (duck-typed, tested).
            store=_WithEvents(store, events),  # type: ignore[arg-type]
            flags=Flags(),
            config=side.config(),
            services=side.services,
            clock=utc_now,
        )
        # The type: ignore below: no queue file on a worker: Intake's queue is the activity's in-
        # memory one (same methods).
        intake = Intake(ctx, queue, None, lambda _name: bool(inp.running))  # type: ignore[arg-type]
        loop = ctx.loops.get(inp.loop)
        routed: dict[str, str] = {}
        for trigger in inp.triggers:
            now = utc_now()
            if trigger.id.startswith(FIRE) and loop is not None:
                fired = self._fire(loop, trigger, now)
                if fired is None:
                    routed[trigger.id] = "skipped: missed (older than catch_up)"
                    continue
                trigger = fired
            queue.last, events.why = None, ""
            intake.offer(trigger, now)
            decision = queue.last
            if decision is not None and decision.pending_id:
                routed[trigger.id] = decision.pending_id
            else:
                why = decision.why if decision is not None else events.why
                routed[trigger.id] = f"skipped: {why or 'overlap policy'}"
        return IntakeResult(pending=queue.pending(inp.loop), routed=routed)

    def _fire(self, loop: Loop, trigger: Trigger, now: datetime) -> Trigger | None:
        """A schedule's fire as the local timer would have it: on time, caught up, or missed."""
        cfg = loop.config
        due = trigger.ts
        schedule = Schedule(cfg.schedule or ["* * * * *"], cfg.timezone)
        later = schedule.next_fire(due) if cfg.schedule else None
        local = due.astimezone(schedule.timezone).isoformat(timespec="minutes")
        superseded = later is not None and later <= now
        late = now - due
        if not superseded and late <= LATE_GRACE:
            reason = f"scheduled for {local}"
            return trigger.model_copy(update={"kind": "schedule", "reason": reason, "ts": now})
        why = "no loopd worker took the fire in time"
        if not superseded and late <= cfg.catch_up:
            reason = f"catching up the fire of {local}, missed because {why}"
            return trigger.model_copy(update={"kind": "catch-up", "reason": reason, "ts": now})
        self.side.store.events.append(
            Event.SCHEDULE_MISSED, now, loop=loop.name, fire=iso(due), why=why
        )
        return None

    # pause, cancel ---------------------------------------------------------------------------
    @activity.defn(name="set_paused")
    def set_paused(self, inp: PauseInput) -> None:
        """`loopd pause` or `resume` reached the controller: recorded in the home's state."""
        self.side.check_controller(inp.loop)
        store = self.side.store
        was = inp.loop in store.paused_loops()
        store.set_paused(inp.loop, inp.paused)
        if was != inp.paused:
            store.events.append(
                Event.LOOP_PAUSED if inp.paused else Event.LOOP_RESUMED, utc_now(), loop=inp.loop
            )

    @activity.defn(name="cancel_queued")
    def cancel_queued(self, inp: CancelQueued) -> None:
        """Pending runs cancelled before they started: recorded as `cancelled`, no agent."""
        from daemon.runs.executor import end_without_agent, new_run

        side = self.side
        side.check_controller(inp.loop)
        loop = side.loop(inp.loop)
        for pending in inp.pending:
            if loop is None:
                side.store.events.append(
                    Event.RUN_FINISHED,
                    utc_now(),
                    loop=pending.loop,
                    run=pending.id,
                    outcome="cancelled",
                    reason="cancelled while queued",
                )
                continue
            run = new_run(side.services, loop, pending)
            end_without_agent(side.services, run, "cancelled", "cancelled while queued")

    # a schedule's fire, when the controller is not running ---------------------------------
    @activity.defn(name="signal_controller")
    async def signal_controller(self, batch: TriggerBatch) -> None:
        """Start the loop's controller with the fire (signal-with-start)."""
        loop = batch.triggers[0].loop
        if not (activity.info().workflow_id or "").startswith(controller_id(loop) + "/fire"):
            raise PermissionError("only a loop's Fire workflow starts its controller")
        await start_controller(
            self.side.client, self.side.config().daemon.engine.task_queue, loop, batch
        )

    # escalations for other machines --------------------------------------------------------
    @activity.defn(name="escalations")
    def escalations(self, request: dict[str, Any]) -> dict[str, Any]:
        """`loopd escalations list|show|resolve` from any machine, done in the home's state."""
        if activity.info().workflow_id != HOME_WORKFLOW_ID:
            raise PermissionError("escalations are answered for the home workflow only")
        store = self.side.store
        action = request.get("action")
        try:
            if action == "list":
                items = list_escalations(store)
                if not request.get("all"):
                    items = [e for e in items if e.is_open]
                return {"items": [e.model_dump(mode="json") for e in items]}
            run_id = str(request.get("run_id", ""))
            if action == "show":
                meta, text = load_escalation(store, run_id)
                return {"meta": meta.model_dump(mode="json"), "text": text}
            if action == "resolve":
                trigger = resolve(
                    store,
                    run_id,
                    utc_now(),
                    note=str(request.get("note", "")),
                    retry=bool(request.get("retry")),
                )
                return {
                    "resolved": run_id,
                    "trigger": trigger.id if trigger else "",
                    "loop": trigger.loop if trigger else "",
                }
        except EscalationNotFound:
            return {"error": "not_found"}
        except AlreadyResolved as exc:
            return {"error": "resolved", "message": str(exc)}
        return {"error": f"unknown action {action!r}"}


async def start_controller(client: Any, task_queue: str, loop: str, batch: TriggerBatch) -> None:
    """Signal the loop's controller with `batch`, starting it when it does not run."""
    from temporalio.common import WorkflowIDConflictPolicy

    from daemon.engine.temporal.controller import Controller

    await client.start_workflow(
        Controller.run,
        ControllerState(loop=loop),
        id=controller_id(loop),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        start_signal="trigger",
        start_signal_args=[batch],
    )
