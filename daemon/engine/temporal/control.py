"""What the commands do on the engine: one view of every machine's runs, from any machine.

`status`, `runs` and `show` read the engine (the loops' controllers, the run workflows, the
schedules, the task queues' pollers); `trigger`, `cancel`, `pause` and `resume` signal it;
`escalations` asks the home (through its workflow) for what only its state/ holds.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from daemon.clock import utc_now
from daemon.config import LOOP_NAME, Loop
from daemon.engine.base import EngineError
from daemon.engine.temporal.connect import RPC_TIMEOUT, connect
from daemon.engine.temporal.models import ControllerView, RunView, TriggerBatch
from daemon.engine.temporal.names import (
    HOME_WORKFLOW_ID,
    controller_id,
    dst_schedule_id,
    run_prefix,
    run_workflow_id,
    schedule_id,
    worker_queue,
)
from daemon.home import Home
from daemon.runs.budget import LOGIN_HOLD, loop_hold
from daemon.state.records import RunRecord, Trigger
from daemon.state.runids import loop_of

WAIT_POLL = 0.25
ROUTE_WAIT = 30.0  # seconds `trigger` waits for the controller to name the run


def _not_found(exc: BaseException) -> bool:
    from temporalio.service import RPCError, RPCStatusCode

    return isinstance(exc, RPCError) and exc.status == RPCStatusCode.NOT_FOUND


class EngineControl:
    """The commands' view of the engine, for one home's `[engine]`."""

    def __init__(self, home: Home, loaded: Any = None) -> None:
        self.home = home
        self.loaded = loaded if loaded is not None else home.load()
        self.engine = self.loaded.daemon.engine

    def _do(self, coro_fn: Any, *args: Any) -> Any:
        async def main() -> Any:
            client = await connect(self.engine, self.home.root, f"cli@{uuid.uuid4().hex[:6]}")
            return await coro_fn(client, *args)

        return asyncio.run(main())

    # reading -----------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Loops (phase, run, attempt, worker, next fire), and who polls the queues."""
        return self._do(self._status)

    async def _status(self, client: Any) -> dict[str, Any]:
        engine = self.engine
        data: dict[str, Any] = {
            "home": str(self.home.root),
            "engine": {
                "kind": "temporal",
                "address": engine.address,
                "namespace": engine.namespace,
                "task_queue": engine.task_queue,
            },
            "daemon": {"running": False, "warnings": list(self.loaded.warnings)},
            "loops": {},
            "workers": await self._pollers(client),
            "errors": [str(e) for e in self.loaded.errors],
        }
        homes = [p for p in data["workers"] if p["queue"] == engine.task_queue]
        data["daemon"]["running"] = bool(homes)
        polled = {p["queue"] for p in data["workers"]}
        for name, loop in sorted(self.loaded.loops.items()):
            queue = worker_queue(engine.task_queue, loop.config.runs_on)
            if loop.config.enabled and queue not in polled:
                data["daemon"]["warnings"].append(
                    f"no worker polls queue {queue}: loop {name}'s attempts wait; start "
                    f"`loopd worker --queue {loop.config.runs_on}` on a machine"
                    if loop.config.runs_on
                    else f"no worker polls queue {queue}: loop {name}'s attempts wait for "
                    "`loopd run` (or `loopd worker`)"
                )
        answering = bool(homes)
        for name, loop in sorted(self.loaded.loops.items()):
            data["loops"][name] = await self._loop_status(client, name, loop, answering)
        return data

    async def _loop_status(
        self, client: Any, name: str, loop: Loop, answering: bool
    ) -> dict[str, Any]:
        """One loop's status: its next fire, and (when the home answers) its controller's view
        and its running run's."""
        info: dict[str, Any] = {
            "enabled": loop.config.enabled,
            "phase": "idle",
            "run": "",
            "attempt": 0,
            "worker": "",
            "pending": 0,
            "paused": False,
            "last_run": "",
            "last_outcome": "",
            "next_fire": await self._next_fire(client, name) if loop.config.schedule else None,
        }
        view = await self._controller(client, name) if answering else None
        if view is not None:
            info.update(
                paused=view.paused,
                pending=len(view.pending),
                last_run=view.last_run,
                last_outcome=view.last_outcome,
                run=view.running,
            )
            if view.paused:
                info["phase"] = "paused"
            elif view.pending and not view.running:
                info["phase"] = "queued"
            if view.held_why and not view.running:
                info.update(phase="waiting", waiting_for=view.held_why)
                info["resume_at"] = view.held_until.isoformat() if view.held_until else None
                if view.held_why.startswith(LOGIN_HOLD):
                    info["resume_at"] = None  # the controller's next ask, not a resume time
            elif not view.running:
                self._hold(name, loop, info)
            if view.running:
                run = await self._run_view(client, name, view.running)
                if run is not None:
                    info.update(phase=run.phase, attempt=run.attempt, worker=run.worker)
                info["worker"] = await self._working(client, name, view.running) or info["worker"]
        return info

    def _hold(self, name: str, loop: Loop, info: dict[str, Any]) -> None:
        """What holds an idle loop's new runs (a refused login, a usage limit, a budget), as
        the local daemon's status says it before a run is asked for."""
        hold = loop_hold(self.home.state(), self.loaded.daemon, loop, utc_now())
        if hold is not None:
            info["waiting_for"] = hold.why
            if hold.until is not None:
                info["resume_at"] = hold.until.isoformat()
            if hold.kind == "login":
                # The controller asks again on a timer: no resume time to show.
                info["resume_at"] = None

    async def _pollers(self, client: Any) -> list[dict[str, Any]]:
        """Who polls the home's queue and the loops' worker queues, and when they last did."""
        from temporalio.api.enums.v1 import TaskQueueType
        from temporalio.api.taskqueue.v1 import TaskQueue
        from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

        queues = {self.engine.task_queue: TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW}
        for loop in self.loaded.loops.values():
            queue = worker_queue(self.engine.task_queue, loop.config.runs_on)
            queues[queue] = TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY
        out = []
        for queue, kind in sorted(queues.items()):
            reply = await client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=client.namespace,
                    task_queue=TaskQueue(name=queue),
                    task_queue_type=kind,
                ),
                timeout=RPC_TIMEOUT,
            )
            for poller in reply.pollers:
                seen = poller.last_access_time.ToDatetime()
                out.append(
                    {"queue": queue, "identity": poller.identity, "seen": seen.isoformat() + "Z"}
                )
        return out

    async def _controller(self, client: Any, loop: str) -> ControllerView | None:
        try:
            return await client.get_workflow_handle(controller_id(loop)).query(
                "status", result_type=ControllerView, rpc_timeout=RPC_TIMEOUT
            )
        except Exception:  # noqa: BLE001 - not started, or no home worker to answer
            return None

    async def _run_view(self, client: Any, loop: str, run_id: str) -> RunView | None:
        try:
            return await client.get_workflow_handle(run_workflow_id(loop, run_id)).query(
                "view", result_type=RunView, rpc_timeout=RPC_TIMEOUT
            )
        except Exception:  # noqa: BLE001 - starting, or no home worker to answer
            return None

    async def _working(self, client: Any, loop: str, run_id: str) -> str:
        """The worker that runs the run's attempt or checks now (the engine knows it)."""
        try:
            described = await client.get_workflow_handle(run_workflow_id(loop, run_id)).describe()
        except Exception:  # noqa: BLE001 - gone meanwhile
            return ""
        for pending in described.raw_description.pending_activities:
            if pending.activity_type.name in ("attempt", "checks") and pending.last_worker_identity:
                return pending.last_worker_identity
        return ""

    async def _next_fire(self, client: Any, loop: str) -> Any:
        times = []
        for sid in (schedule_id(loop), dst_schedule_id(loop)):
            try:
                described = await client.get_schedule_handle(sid).describe()
            except Exception:  # noqa: BLE001 - RPCError NOT_FOUND: no such schedule
                continue
            if not described.schedule.state.paused:
                times += list(described.info.next_action_times[:1])
        return min(times).isoformat() if times else None

    def runs(self, loop: str | None, limit: int) -> list[dict[str, Any]]:
        """Every machine's runs, newest first: queued, running and finished."""
        return self._do(self._runs, loop, limit)

    async def _runs(self, client: Any, loop: str | None, limit: int) -> list[dict[str, Any]]:
        from temporalio.client import WorkflowExecutionStatus

        query = 'WorkflowType = "RunWorkflow"'
        if loop:
            query += f' AND WorkflowId STARTS_WITH "{run_prefix(loop)}"'
        found = []
        async for execution in client.list_workflows(query):
            memo = await execution.memo()
            run_id = execution.id.rsplit("/", 1)[-1]
            running = execution.status == WorkflowExecutionStatus.RUNNING
            found.append(
                {
                    "run": run_id,
                    "id": run_id,
                    "loop": memo.get("loop", loop_of(run_id)),
                    "trigger": memo.get("trigger", ""),
                    "started": execution.start_time,
                    "finished": execution.close_time,
                    "outcome": memo.get("outcome"),
                    "phase": "running" if running else "idle",
                    "reason": memo.get("reason", ""),
                    "attempts": memo.get("attempts", 0),
                    "branch": memo.get("branch", ""),
                    "tokens": memo.get("tokens", 0),
                    "score": memo.get("score"),
                    "queue": memo.get("queue", ""),
                }
            )
        names = [loop] if loop else sorted(self.loaded.loops)
        for name in names:
            view = await self._controller(client, name)
            for run_id in view.pending if view else []:
                found.append(
                    {"run": run_id, "id": run_id, "loop": name, "trigger": "", "started": None,
                     "finished": None, "outcome": None, "phase": "queued", "reason": "",
                     "attempts": 0, "branch": "", "tokens": 0, "score": None, "queue": ""}
                )  # fmt: skip
        found.sort(key=lambda r: r["id"], reverse=True)
        return found[:limit]

    def record(self, run_id: str) -> RunRecord | str | None:
        """The run's record (running: as the home last wrote it); "queued"; None: unknown."""
        return self._do(self._record, run_id)

    async def _lookup(self, client: Any, run_id: str) -> tuple[Any, bool | None]:
        """The run's workflow handle and whether it runs (None: no workflow yet, or never)."""
        from temporalio.client import WorkflowExecutionStatus

        loop = loop_of(run_id)
        handle = client.get_workflow_handle(run_workflow_id(loop, run_id), result_type=RunRecord)
        try:
            described = await handle.describe()
        except Exception as exc:
            if not _not_found(exc):
                raise
            return handle, None
        return handle, described.status == WorkflowExecutionStatus.RUNNING

    async def _queued(self, client: Any, run_id: str) -> bool:
        view = await self._controller(client, loop_of(run_id))
        return view is not None and run_id in view.pending

    async def _record(self, client: Any, run_id: str) -> RunRecord | str | None:
        handle, running = await self._lookup(client, run_id)
        if running is None:
            return "queued" if await self._queued(client, run_id) else None
        if running:
            return await handle.query("record", result_type=RunRecord, rpc_timeout=RPC_TIMEOUT)
        try:
            return await handle.result()
        except Exception as exc:  # noqa: BLE001 - the workflow failed: say so, do not crash
            raise EngineError(f"run {run_id}'s workflow ended without a record: {exc}") from None

    # acting --------------------------------------------------------------------------------
    def cancel(self, run_id: str) -> tuple[int, str]:
        """Cancel a running or queued run: (exit code, what to print)."""
        return self._do(self._cancel, run_id)

    async def _cancel(self, client: Any, run_id: str) -> tuple[int, str]:
        handle, running = await self._lookup(client, run_id)
        if running is None:
            if not await self._queued(client, run_id):
                return 2, f"unknown run {run_id!r}; `loopd runs` lists them"
            controller = client.get_workflow_handle(controller_id(loop_of(run_id)))
            await controller.signal("cancel", run_id)
            return 0, f"cancel requested for queued run {run_id}"
        if not running:
            record = await handle.result()
            return 1, f"run {run_id} already ended: {record.outcome}"
        await handle.cancel()
        try:
            record = await asyncio.wait_for(handle.result(), 20)
            return 0, f"{run_id}: {record.outcome}"
        except TimeoutError:
            return 0, f"{run_id}: cancel requested"

    def pause(self, loop: str, paused: bool) -> None:
        self._do(self._pause, loop, paused)

    async def _pause(self, client: Any, loop: str, paused: bool) -> None:
        from daemon.engine.temporal.loopacts import start_controller

        await start_controller(client, self.engine.task_queue, loop, TriggerBatch(triggers=[]))
        await client.get_workflow_handle(controller_id(loop)).signal("pause", paused)

    def trigger(
        self, loop: str, reason: str, wait: bool, emit: Any, force: bool = False
    ) -> RunRecord | str:
        """Queue a manual run (`force`: even when done_when passes already); with `wait`, its
        record once it ended (`emit` gets the RUN_ID), or "skipped: WHY"; without, its RUN_ID
        (or "skipped: WHY", or "" when the controller has not taken it yet)."""
        return self._do(self._trigger, loop, reason, wait, emit, force)

    async def _trigger(
        self, client: Any, loop: str, reason: str, wait: bool, emit: Any, force: bool
    ) -> RunRecord | str:
        from daemon.engine.temporal.loopacts import start_controller

        if not LOOP_NAME.match(loop):
            raise EngineError(f"{loop!r} is not a loop name")
        trigger = Trigger(
            loop=loop,
            kind="manual",
            reason=reason,
            ts=utc_now(),
            id=f"cli-{uuid.uuid4().hex}",
            force=force,
        )
        batch = TriggerBatch(triggers=[trigger])
        if loop in self.loaded.loops:
            await start_controller(client, self.engine.task_queue, loop, batch)
        else:  # a loop of the home that this machine has no file of: its controller runs
            try:
                await client.get_workflow_handle(controller_id(loop)).signal("trigger", batch)
            except Exception as exc:
                if not _not_found(exc):
                    raise
                raise EngineError(
                    f"unknown loop {loop!r}: the engine runs no controller for it"
                ) from None
        if not wait:
            return await self._routed_within(client, loop, trigger.id)
        run_id = await self._routed(client, loop, trigger.id)
        if run_id.startswith("skipped"):
            return run_id
        emit(run_id)
        handle = client.get_workflow_handle(run_workflow_id(loop, run_id), result_type=RunRecord)
        while True:
            try:
                return await handle.result()
            except Exception as exc:
                if not _not_found(exc):
                    raise
            await asyncio.sleep(WAIT_POLL)  # queued behind the loop's running run

    def routed(self, loop: str, trigger_id: str) -> str:
        """The RUN_ID holding a trigger the home queued ("skipped: WHY"); "" when the loop's
        controller has not taken it within ROUTE_WAIT seconds."""
        return self._do(self._routed_within, loop, trigger_id)

    async def _routed_within(self, client: Any, loop: str, trigger_id: str) -> str:
        try:
            return await asyncio.wait_for(self._routed(client, loop, trigger_id), ROUTE_WAIT)
        except TimeoutError:
            return ""

    async def _routed(self, client: Any, loop: str, trigger_id: str) -> str:
        """The run that holds the trigger, once the controller took it (its home answers)."""
        silent_since = time.monotonic()
        while True:
            view = await self._controller(client, loop)
            if view is not None:
                silent_since = time.monotonic()
                if trigger_id in view.routed:
                    return view.routed[trigger_id]
            elif time.monotonic() - silent_since > 120:
                raise EngineError(
                    f"loop {loop}'s controller does not answer: is `loopd run` running for the "
                    "home on this engine?"
                )
            await asyncio.sleep(WAIT_POLL)

    def escalations(self, request: dict[str, Any]) -> dict[str, Any]:
        """`escalations list|show|resolve`, answered by the home from its state/."""
        return self._do(self._escalations, request)

    async def _escalations(self, client: Any, request: dict[str, Any]) -> dict[str, Any]:
        handle = client.get_workflow_handle(HOME_WORKFLOW_ID)
        try:
            return await asyncio.wait_for(
                handle.execute_update("escalations", request, result_type=dict), 30
            )
        except TimeoutError:
            raise EngineError(
                "the home does not answer: is `loopd run` running for the home on this engine?"
            ) from None
