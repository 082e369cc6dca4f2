"""`loopd run` and `loopd worker` on the Temporal engine: the processes, their workers, signals.

`loopd run` (the home) registers the loops (a controller workflow each, their Schedules, the
home workflow), forwards its inbox (hooks, `escalations resolve --retry`) and file changes to
the controllers, and runs a worker: the home's queue (workflows, rules, prompts, progress,
escalations) and the default worker queue. `loopd worker` runs attempts only, on its queue
(`loopd-NAME`) and on a queue of its own for the steps that need its files. Both kill, at
start, what attempts of a killed predecessor left running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import daemon as package
from daemon.clock import utc_now
from daemon.config import LOOP_NAME, LoadedConfig
from daemon.engine.temporal.connect import connect
from daemon.engine.temporal.homeoutside import start_outside, tick_outside
from daemon.engine.temporal.homeside import HomeSide, config_mark
from daemon.engine.temporal.inboxtaker import InboxTaker
from daemon.engine.temporal.loopacts import LoopActivities, start_controller
from daemon.engine.temporal.models import TriggerBatch
from daemon.engine.temporal.names import (
    HOME_WORKFLOW_ID,
    controller_id,
    own_queue,
    worker_id,
    worker_queue,
)
from daemon.engine.temporal.runacts import RunActivities
from daemon.engine.temporal.setupacts import SetupActivities
from daemon.engine.temporal.workersetup import SetupStep
from daemon.engine.temporal.workerside import WorkerSide
from daemon.home import Home
from daemon.processes import set_child_subreaper, set_not_dumpable
from daemon.sandbox.limits import sweep_stale_groups
from daemon.scheduling.hook_script import take_records
from daemon.scheduling.inbox_watch import InboxWatcher
from daemon.service.context import ConfigFatal, Context, Flags, load_config
from daemon.service.floor import Floor
from daemon.service.holds import Holds
from daemon.service.housekeeper import Housekeeper
from daemon.service.reload import changed_loops, first_load, keep_last_good
from daemon.service.stopping import engine_stop_at_once, engine_waiting_line
from daemon.service.watchers import Watchers
from daemon.state.eventtypes import Event
from daemon.state.lock import HomeLock
from daemon.state.space import no_space
from daemon.state.store import StateStore
from daemon.systemd import SystemdNotifier

INBOX_BATCH = 500  # inbox files forwarded per round
RESYNC_EVERY = 2.0  # seconds between looks at the configuration files
STATUS_EVERY = 2.0  # seconds between looks at the engine for status.toml


class Process:
    """One `loopd run` or `loopd worker` process."""

    def __init__(
        self, home: Home, loaded: LoadedConfig, store: StateStore, role: str, metrics: str = ""
    ) -> None:
        self.home = home
        self.loaded = loaded
        self.store = store
        self.role = role  # "home" | "worker"
        self.engine = loaded.daemon.engine
        self.stop = asyncio.Event()
        self.stops = 0
        self.hurry = asyncio.Event()  # a second stop signal: stop at once
        self.wake = threading.Event()
        self.resync = asyncio.Event()  # SIGHUP: read the configuration again now
        self.workers: list[Any] = []
        self.ctx: Any = None  # the home's daemon context (watchers, housekeeping)
        self.watchers: Any = None
        self.floor: Floor | None = None  # the home's: a full state/ (daemon/service/floor.py)
        self.outside: Any = None  # the home's [listen], remote poller, traces (homeoutside.py)
        self.metrics = metrics  # `loopd worker --metrics HOST:PORT`

    # the whole life ------------------------------------------------------------------------
    async def run(self, queue: str | None) -> int:
        wid = worker_id(self.home.root)
        identity = f"{self.role}:{wid}:{os.getpid()}"
        shared = worker_queue(self.engine.task_queue, queue or "")
        mine = own_queue(shared, wid)
        side = WorkerSide(self.home, self.loaded, identity, mine, self.role == "home")
        # Bound before the engine is reached: a taken port stops the start at once.
        listener = self._listen(side) if self.role == "worker" else None
        client = await connect(self.engine, self.home.root, identity)
        for run_id in side.reap():
            print(f"loopd: killed what a stopped worker left of run {run_id}", flush=True)
        slots = self.loaded.daemon.limits.max_concurrent_runs
        pool = ThreadPoolExecutor(max_workers=2 * slots + 4, thread_name_prefix="attempt")
        self.workers = self._attempt_workers(client, side, pool, identity, shared, mine)
        tasks: list[Any] = []
        if self.role == "home":
            tasks = await self._home_chores(client, identity)
        self._signals()
        self._announce(shared)
        tasks.append(self._forward(client))
        await self._serve(tasks)
        pool.shutdown(wait=False, cancel_futures=True)
        for part in (listener, self.outside):
            if part is not None:
                part.stop()
        print("loopd: stopped", flush=True)
        return 0

    def _attempt_workers(
        self, client: Any, side: WorkerSide, pool: Any, identity: str, shared: str, mine: str
    ) -> list[Any]:
        """The workers of attempts: one on the shared queue, one on this worker's own."""
        from temporalio.worker import Worker

        slots = self.loaded.daemon.limits.max_concurrent_runs
        grace = timedelta(seconds=self.loaded.daemon.limits.shutdown_grace.total_seconds() + 15)
        return [
            Worker(
                client,
                task_queue=shared,
                # The checks too: those of an attempt whose worker is gone run on another.
                activities=[side.attempt, side.checks, *SetupStep(side).activities()],
                activity_executor=pool,
                max_concurrent_activities=slots,
                graceful_shutdown_timeout=grace,
                identity=identity,
            ),
            Worker(
                client,
                task_queue=mine,
                # The attempt too: one parked on a usage limit resumes on its own worker.
                activities=[side.attempt, side.checks, side.post_mortem],
                activity_executor=pool,
                max_concurrent_activities=slots + 1,
                graceful_shutdown_timeout=grace,
                identity=identity,
            ),
        ]

    async def _home_chores(self, client: Any, identity: str) -> list[Any]:
        """The home's worker (put first), its loops registered, its context and chores."""
        home_side = HomeSide(self.home, self.loaded, self.store, client)
        self.workers.insert(0, self._home_worker(client, home_side, identity))
        for name, why in (await register(client, self.loaded)).items():
            print(f"loopd: loop {name} not registered: {why}", file=sys.stderr, flush=True)
        self.ctx = _context(self.home, self.store, home_side, self.wake)
        self.outside = start_outside(self.ctx, lambda: not self.stop.is_set())

        home_side.holds = Holds(self.ctx)  # usage limits and budgets hold new runs
        return [
            self._status_file(client, home_side.holds),
            self._resync(client, home_side),
            self._housekeeping(home_side),
            tick_outside(self.outside),
        ]

    async def _serve(self, tasks: list[Any]) -> None:
        """The workers and chores run until a stop; then the workers shut down gracefully."""
        notifier = _notifier()
        async with asyncio.TaskGroup() as group:
            running = [group.create_task(w.run()) for w in self.workers]
            chores = [group.create_task(t) for t in tasks]
            if notifier is not None:
                chores.append(group.create_task(self._watchdog(notifier, running)))
                notifier.ready()
                notifier.status(f"on the engine at {self.engine.address}")
            await self.stop.wait()
            at_once = group.create_task(engine_stop_at_once(self.hurry))
            grace = self.loaded.daemon.limits.shutdown_grace
            print(engine_waiting_line(grace.total_seconds()), flush=True)
            if notifier is not None:
                notifier.stopping()
                notifier.extend_timeout(grace.total_seconds() + 60)
            for chore in chores:
                chore.cancel()
            await asyncio.gather(*(w.shutdown() for w in self.workers), return_exceptions=True)
            for task in running:
                task.cancel()
            at_once.cancel()

    def _listen(self, side: WorkerSide) -> Any:
        """This worker's /metrics, when an address is set (engine/temporal/workermetrics.py)."""
        from daemon.engine.temporal.workermetrics import start_metrics

        return start_metrics(self.loaded, self.metrics, side.store, lambda: not self.stop.is_set())

    def _home_worker(self, client: Any, side: HomeSide, identity: str) -> Any:
        from temporalio.worker import Worker
        from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

        from daemon.engine.temporal.controller import WORKFLOWS

        acts = [
            *RunActivities(side).activities(),
            *SetupActivities(side).activities(),
            *LoopActivities(side).activities(),
        ]
        return Worker(
            client,
            task_queue=self.engine.task_queue,
            workflows=WORKFLOWS,
            activities=acts,
            activity_executor=ThreadPoolExecutor(max_workers=24, thread_name_prefix="home"),
            max_concurrent_activities=16,
            max_concurrent_local_activities=16,
            # loopd's own modules are imported once, not again for every workflow run.
            workflow_runner=SandboxedWorkflowRunner(
                restrictions=SandboxRestrictions.default.with_passthrough_modules("daemon")
            ),
            identity=identity,
        )

    async def _watchdog(self, notifier: Any, running: list[Any]) -> None:
        """systemd's watchdog is fed while every worker still runs."""
        every = (notifier.watchdog_interval() or 0) / 2
        while every:
            await asyncio.sleep(every)
            if not any(task.done() for task in running):
                notifier.watchdog()

    def _signals(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGHUP, self.resync.set)

        def on_stop() -> None:
            self.stops += 1
            self.stop.set()
            if self.stops > 1:
                self.hurry.set()  # a second signal: do not wait for running attempts

        loop.add_signal_handler(signal.SIGTERM, on_stop)
        loop.add_signal_handler(signal.SIGINT, on_stop)

    def _announce(self, queue: str) -> None:
        engine = self.engine
        where = f"the engine at {engine.address}, namespace {engine.namespace}"
        role, what = "worker", ""
        if self.role == "home":
            enabled = sorted(n for n, lp in self.loaded.loops.items() if lp.config.enabled)
            role, what = "running", f"{len(enabled)} enabled loop(s)"
            what += f"{': ' + ', '.join(enabled) if enabled else ''}; "
        print(
            f"loopd {package.__version__} {role} for {self.home.root} (pid {os.getpid()}) "
            f"on {where}: {what}attempts of queue {queue}; Ctrl-C or SIGTERM stops it",
            flush=True,
        )
        for error in self.loaded.errors:
            print(f"loopd: loop disabled: {error}", file=sys.stderr, flush=True)
        for warning in self.loaded.warnings:
            print(f"loopd: warning: {warning}", file=sys.stderr, flush=True)

    # triggers in -----------------------------------------------------------------------------
    async def _forward(self, client: Any) -> None:
        """Inbox files (and, at the home, file changes) to the loops' controllers."""
        watcher: Watchers | InboxWatcher
        if self.ctx is not None:  # the home: the local daemon's watchers, as they are
            self.watchers = watcher = Watchers.start(self.ctx, lambda _name: False)
        else:
            watcher = InboxWatcher(self.store.inbox_dir, self.wake)
            watcher.start()
        loop = asyncio.get_running_loop()
        taker = InboxTaker(self.store, self.role)
        # A full state/ stops nothing: the forwarding waits for room, as the local tick does.
        self.floor = Floor(self.ctx) if self.ctx is not None else None
        try:
            while not self.stop.is_set():
                await loop.run_in_executor(None, self.wake.wait, 0.5)
                self.wake.clear()
                if self.floor is not None and self.floor.blocked(utc_now()):
                    continue
                try:
                    await self._forward_once(client, taker)
                except OSError as exc:
                    if not no_space(exc):
                        raise
                    if self.floor is not None:
                        self.floor.hit(exc, utc_now(), "the inbox's forwarding")
        finally:
            taker.release()
            watcher.stop()

    async def _forward_once(self, client: Any, taker: Any) -> None:
        triggers = self.watchers.poll(utc_now()) if self.watchers else []
        # One process per home forwards the inbox: a file is sent once.
        names = []
        if taker.may_take():
            # The git hooks leave records of what moved: they become trigger files.
            take_records(str(self.store.inbox_dir))
            names = self.store.inbox_names()[:INBOX_BATCH]
        for name in names:
            trigger = self.store.read_trigger(name)
            if trigger is not None:
                triggers.append(trigger)
        await self._send(client, triggers)
        self.store.remove_inbox(names)
        if len(names) == INBOX_BATCH:
            self.wake.set()

    async def _send(self, client: Any, triggers: list[Any]) -> None:
        by_loop: dict[str, list[Any]] = {}
        for trigger in triggers:
            by_loop.setdefault(trigger.loop, []).append(trigger)
        for name, batch in by_loop.items():
            message = TriggerBatch(triggers=batch)
            if self.role == "home" and name in self.loaded.loops:
                await start_controller(client, self.engine.task_queue, name, message)
            elif LOOP_NAME.match(name):
                try:  # a worker does not know the home's loops: only a running controller
                    await client.get_workflow_handle(controller_id(name)).signal("trigger", message)
                except Exception as exc:  # noqa: BLE001 - RPCError: no such loop on the engine
                    self._dropped(name, batch, f"no controller for loop {name!r}: {exc}")
            else:
                self._dropped(name, batch, "not a loop name")

    def _dropped(self, name: str, batch: list[Any], why: str) -> None:
        for trigger in batch:
            self.store.events.append(
                Event.TRIGGER_SKIPPED, utc_now(), loop=name, inbox=trigger.id, why=why[:300]
            )

    async def _housekeeping(self, side: HomeSide) -> None:
        """Pruning old runs and retiring stale rules, as the local daemon does."""
        keeper = Housekeeper(self.ctx)
        while True:
            keeper.tick(utc_now(), keep=set(self.store.live_runs()))
            await asyncio.sleep(60)

    async def _status_file(self, client: Any, holds: Any) -> None:
        """state/status.toml, as the local daemon writes it, from the engine's view."""
        from daemon.engine.temporal.control import EngineControl
        from daemon.engine.temporal.statusfile import EngineStatusBoard

        board = EngineStatusBoard(self.ctx, EngineControl(self.home, self.loaded), holds, utc_now())
        failed = ""
        while True:
            try:
                await board.write(client, utc_now())
                failed = ""
            except Exception as exc:  # noqa: BLE001 - status.toml never stops loopd
                if self.floor is not None:
                    self.floor.hit(exc, utc_now(), "state/status.toml")
                if str(exc) != failed:
                    failed = str(exc)
                    print(f"loopd: status.toml not written: {exc}", file=sys.stderr, flush=True)
            await asyncio.sleep(STATUS_EVERY)

    async def _resync(self, client: Any, side: HomeSide) -> None:
        """A changed loopd.toml or loop file, SIGHUP, `loopd reload`: as locally, loop by loop."""
        mark = config_mark(self.home)
        files = first_load(self.home, self.loaded)
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.resync.wait(), RESYNC_EVERY)
            asked = self.resync.is_set()
            self.resync.clear()
            now = config_mark(self.home)
            if now == mark and not asked:
                continue
            mark = now
            files = await self._reload(client, side, files)

    async def _reload(self, client: Any, side: HomeSide, files: Any) -> Any:
        """Read the configuration again; a broken loop file keeps its loop's last good
        configuration (and schedule), a broken loopd.toml keeps everything. The event names
        the `loopd reload` requests it answers."""
        requests = self.store.take_reload_requests()
        try:
            loaded = load_config(self.home)
        except ConfigFatal as exc:
            self.store.events.append(
                Event.RELOAD_FAILED, utc_now(), error=str(exc)[:1000], requests=requests
            )
            return files
        merged = keep_last_good(self.home, self.loaded, files, loaded)
        loaded = side.adopt(loaded)  # an [engine] change waits for a restart
        try:
            failed = await register(client, loaded)
        except Exception as exc:  # noqa: BLE001 - a reload never stops loopd
            error = f"{type(exc).__name__}: {exc}"
            self.store.events.append(
                Event.RELOAD_FAILED, utc_now(), error=error[:1000], requests=requests
            )
            return files
        self.loaded = loaded
        self.ctx.config, self.ctx.services, self.ctx.files = loaded, side.services, merged
        if self.watchers is not None:
            self.watchers.restart_changes()
        self.store.events.rotate_bytes = loaded.daemon.limits.events_rotate
        if side.restart:
            self.store.events.append(Event.RESTART_NEEDED, utc_now(), changes=side.restart)
        broken = {e.file.stem for e in loaded.errors if e.file.parent == self.home.loops_dir}
        self.store.events.append(
            Event.RELOADED,
            utc_now(),
            loops=sorted(loaded.loops),
            changed=changed_loops(files, merged),
            stale=sorted(merged.stale),
            not_loaded=sorted(broken - set(loaded.loops)),
            failed=failed,
            restart=side.restart,
            requests=requests,
        )
        return merged


async def register(client: Any, loaded: LoadedConfig) -> dict[str, str]:
    """The home workflow, a controller per enabled loop, and the loops' Schedules; the loops
    the engine refused, with why (the others are registered)."""
    from temporalio.common import WorkflowIDConflictPolicy

    from daemon.engine.temporal.schedules import HORIZON, delete, put_loop_schedules

    task_queue = loaded.daemon.engine.task_queue
    await client.start_workflow(
        "Home",
        id=HOME_WORKFLOW_ID,
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    scheduled, failed = set(), {}
    now = utc_now()
    for name, loop in sorted(loaded.loops.items()):
        if not loop.config.enabled:
            continue
        try:
            await start_controller(client, task_queue, name, TriggerBatch(triggers=[]))
            if loop.config.schedule:
                scheduled.add(name)  # kept when the engine refuses the new one
                await put_loop_schedules(client, name, loop.config, task_queue, now, now + HORIZON)
        except Exception as exc:  # noqa: BLE001 - one loop's trouble does not stop the others
            failed[name] = f"{type(exc).__name__}: {exc}"[:500]
    async for listed in await client.list_schedules():
        sid = listed.id
        if sid.startswith("loopd/") and sid.split("/")[1] not in scheduled:
            await delete(client, sid)
    return failed


def serve(home: Home, role: str, queue: str | None = None, metrics: str = "") -> int:
    """The process: take the home's lock, run until SIGTERM."""
    from daemon.service.context import load_config

    # Agents and checks run as this user: they must not read loopd's memory or environment
    # (the engine's credentials included).
    set_not_dumpable()
    loaded = load_config(home)  # ConfigFatal: exit 2 with the reason
    store = StateStore(home.state_dir, loaded.daemon.limits.events_rotate)
    lock = store.lock if role == "home" else HomeLock(store.root / "worker.lock")
    lock.acquire()  # LockHeld: exit 2 naming the pid
    set_child_subreaper()
    sweep_stale_groups()  # what a process killed with -9 left in the control groups
    started = time.monotonic()
    store.events.append(
        Event.DAEMON_STARTED if role == "home" else Event.WORKER_STARTED,
        utc_now(),
        pid=os.getpid(),
        version=package.__version__,
        engine="temporal",
    )
    try:
        return asyncio.run(Process(home, loaded, store, role, metrics).run(queue))
    finally:
        store.events.append(
            Event.DAEMON_STOPPED if role == "home" else Event.WORKER_STOPPED,
            utc_now(),
            pid=os.getpid(),
            seconds=round(time.monotonic() - started, 1),
        )
        lock.release()


def _notifier() -> Any:
    """systemd's notify socket, taken out of the environment (agents must not inherit it)."""
    return SystemdNotifier.from_env(unset_environment=True)


def _context(home: Home, store: StateStore, side: HomeSide, wake: threading.Event) -> Any:
    """The local daemon's context, for its watchers and housekeeper at the home."""
    return Context(
        home=home,
        store=store,
        flags=Flags(wake=wake),
        config=side.config(),
        services=side.services,
        clock=utc_now,
    )
