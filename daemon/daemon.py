"""The daemon: `tick(now)` takes due work; a thin driver calls it; signals only set flags."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import daemon as package
from daemon.clock import utc_now
from daemon.config import LoadedConfig, Loop
from daemon.globs import wildmatch
from daemon.home import Home
from daemon.runs.services import RunServices
from daemon.state.lock import HomeLock, LockHeld
from daemon.state.records import DaemonStatus, LoopStatus, StatusFile, Trigger
from daemon.state.store import StateStore

HEARTBEAT_EVERY = timedelta(seconds=10)


class ConfigFatal(Exception):
    """`loopd.toml` itself is broken: the daemon cannot start (exit 2)."""


@dataclass
class Worker:
    """A run in its own thread."""

    loop: str
    run_id: str
    thread: threading.Thread
    executor: Any = None


@dataclass
class Flags:
    """Set by signal handlers, read by the driver."""

    stop: threading.Event = field(default_factory=threading.Event)
    reload: threading.Event = field(default_factory=threading.Event)
    wake: threading.Event = field(default_factory=threading.Event)
    stops: int = 0


class Daemon:
    """One daemon per home."""

    def __init__(self, home: Home, clock=utc_now) -> None:  # noqa: ANN001 - a clock callable
        self.home = home
        self.clock = clock
        self.loaded: LoadedConfig | None = None
        self.store: StateStore | None = None
        self.services: RunServices | None = None
        self.workers: dict[str, Worker] = {}
        self.flags = Flags()
        self.watchers: list[Any] = []
        self.change_watchers: dict[str, Any] = {}
        self._status_written: datetime | None = None
        self._reap_pending = False
        self._status_cache: str = ""

    # configuration -----------------------------------------------------------
    @property
    def loops(self) -> dict[str, Loop]:
        assert self.loaded is not None
        return self.loaded.loops

    def _load(self) -> LoadedConfig:
        loaded = self.home.load()
        if not loaded.daemon_ok:
            raise ConfigFatal(
                "\n".join(str(e) for e in loaded.errors if e.file == self.home.config_path)
            )
        return loaded

    def _report_config(self, loaded: LoadedConfig, now: datetime) -> None:
        assert self.store is not None
        for error in loaded.errors:
            self.store.events.append(
                "config_error",
                now,
                file=str(error.file),
                key=error.key,
                message=error.message,
                fix=error.fix,
            )
        for warning in loaded.warnings:
            self.store.events.append("config_warning", now, message=warning)

    # start -------------------------------------------------------------------
    def start(self, now: datetime) -> None:
        """Take the home's lock, recover what a dead daemon left, start triggers."""
        from daemon.agents.processes import set_child_subreaper
        from daemon.scheduling.queue import RunQueue
        from daemon.scheduling.timer import CronTimer

        loaded = self._load()
        self.loaded = loaded
        self.store = StateStore(self.home.state_dir, loaded.daemon.limits.events_rotate)
        self.store.lock.acquire()  # LockHeld propagates: exit 2 naming the pid
        self.store.events.repair()
        set_child_subreaper()
        self.services = RunServices(
            home=self.home, config=loaded.daemon, store=self.store, clock=self.clock
        )
        self.services.notifications = self._notifications()
        self.started = now
        self.store.events.append(
            "daemon_started",
            now,
            pid=os.getpid(),
            version=package.__version__,
            loops=sorted(loaded.loops),
            broken=sorted({e.file.stem for e in loaded.errors if e.file.parent.name == "loops"}),
        )
        self._report_config(loaded, now)
        self.queue = RunQueue()
        self._restore_queue(now)
        self.timer = CronTimer(self.store.root / "schedule.toml")
        for trigger, misses in self.timer.start(self._scheduled_loops(), now):
            for miss in misses:
                self.store.events.append("schedule_missed", now, **miss)
            if trigger is not None:
                self.offer(trigger, now)
        self._recover(now)
        self._start_watchers()
        self.write_status(now, force=True)

    def _notifications(self) -> Any:
        from daemon.people.notify import Notifications

        assert self.loaded is not None and self.store is not None
        return Notifications(self.loaded.daemon.notify, self.store.events)

    def _scheduled_loops(self) -> dict[str, Any]:
        return {
            name: loop.config
            for name, loop in self.loops.items()
            if loop.config.enabled and loop.config.schedule
        }

    def _start_watchers(self) -> None:
        from daemon.scheduling.inbox_watch import InboxWatcher

        assert self.store is not None
        inbox = InboxWatcher(self.store.inbox_dir, self.flags.wake)
        inbox.start()
        self.watchers = [inbox]
        self._start_change_watchers()

    def _start_change_watchers(self) -> None:
        from daemon.scheduling.changes import ChangeWatcher

        assert self.loaded is not None
        worktrees = self.loaded.daemon.limits.worktrees_path
        for watcher in self.change_watchers.values():
            watcher.stop()
        self.change_watchers = {}
        for name, loop in self.loops.items():
            if not (loop.config.enabled and loop.config.on_change):
                continue
            watcher = ChangeWatcher(
                loop=name,
                repo=loop.config.repo_path,
                globs=loop.config.on_change,
                debounce=loop.config.debounce.total_seconds(),
                enqueue=lambda t: None,
                ignore_under=[worktrees],
                is_running=lambda name=name: name in self.workers,
                events=self.store.events,
            )
            try:
                watcher.start()
            except Exception as exc:  # noqa: BLE001 - one loop's watcher must not stop the daemon
                self._event("watch_failed", loop=name, error=str(exc)[:500])
                continue
            self.change_watchers[name] = watcher

    # recovery ----------------------------------------------------------------
    def _recover(self, now: datetime) -> None:
        """Runs a dead loopd left: judging resumes; a run mid-attempt is interrupted, retried."""
        from daemon.runs.recovery import recover_run

        assert self.store is not None and self.services is not None
        for run_id in self.store.live_runs():
            recovery = recover_run(self.services, self.loops, run_id, now)
            if recovery.action == "resume" and recovery.run is not None:
                loop = self.loops[recovery.run.loop]
                lock = self.store.loop_lock(loop.name)
                lock.acquire()  # free: checked by recover_run, and this daemon holds the home
                self._launch(loop, recovery.run, lock)
            elif recovery.action == "retry" and recovery.retry_trigger is not None:
                self.offer(recovery.retry_trigger, now)

    def _restore_queue(self, now: datetime) -> None:
        """Pending runs a stopped daemon had queued are queued again, under their ids."""
        from daemon.scheduling.queue import PendingRun

        assert self.store is not None
        for entry in self.store.load_queue():
            try:
                pending = PendingRun(
                    id=entry["id"],
                    loop=entry["loop"],
                    trigger=Trigger.model_validate(entry["trigger"]),
                    queued_at=datetime.fromisoformat(entry["queued_at"]),
                    merged=[Trigger.model_validate(t) for t in entry.get("merged", [])],
                )
            except Exception as exc:  # noqa: BLE001 - a bad entry is dropped with an event
                self.store.events.append("queue_entry_dropped", now, error=str(exc)[:300])
                continue
            if pending.loop in self.loops:
                self.queue.restore(pending)
            else:
                self.store.events.append(
                    "queue_entry_dropped",
                    now,
                    loop=pending.loop,
                    run=pending.id,
                    error="the loop is no longer valid",
                )

    # triggers ------------------------------------------------------------------
    def _event(self, type: str, **fields: Any) -> None:
        assert self.store is not None
        self.store.events.append(type, self.clock(), **fields)

    def offer(self, trigger: Trigger, now: datetime) -> None:
        """A trigger arrives: filter it, apply the loop's overlap policy, record it."""
        from daemon.people.escalation import blocking_escalation

        assert self.store is not None
        fields = {"kind": trigger.kind, "reason": trigger.reason, "inbox": trigger.id or None}
        if trigger.ref:
            fields.update(ref=trigger.ref, old=trigger.old, new=trigger.new)

        def skip(why: str) -> None:
            self.store.events.append("trigger_skipped", now, loop=trigger.loop, why=why, **fields)

        loop = self.loops.get(trigger.loop)
        if loop is None or not loop.config.enabled:
            return skip("unknown or broken loop" if loop is None else "loop disabled")
        if trigger.kind == "push":
            branch = trigger.ref.removeprefix("refs/heads/")
            if not any(wildmatch(g, branch) for g in loop.config.on_push):
                return skip("branch not in on_push")
            if loop.config.isolation == "in-place" and loop.name in self.workers:
                # An in-place run commits on the watched branch itself: not a new push.
                return skip("the loop's own in-place run")
        if blocking_escalation(self.store, loop.name, loop.config.task, trigger.kind):
            return skip("an escalation for this task is open; resolve it with `loopd escalations`")
        self.store.events.append("trigger", now, loop=loop.name, **fields)
        decision = self.queue.offer(trigger, loop.config, now)
        if decision.action == "merged":
            self.store.events.append(
                "trigger_merged", now, loop=loop.name, into=decision.pending_id, **fields
            )
        elif decision.event == "trigger_skipped":
            skip(decision.why)
        self._save_queue()

    def _save_queue(self) -> None:
        assert self.store is not None
        entries = []
        for pending in self.queue.pending():
            entries.append(
                {
                    "id": pending.id,
                    "loop": pending.loop,
                    "queued_at": pending.queued_at.isoformat(),
                    "trigger": pending.trigger.model_dump(mode="json"),
                    "merged": [t.model_dump(mode="json") for t in pending.merged],
                }
            )
        self.store.save_queue(entries)

    # the tick ------------------------------------------------------------------
    def tick(self, now: datetime) -> None:
        """Take due work: inbox, cron, file changes, cancels; start ready runs; write status."""
        from daemon.agents.processes import reap_orphans

        assert self.store is not None
        for trigger in self.store.take_triggers():
            self.offer(trigger, now)
        for trigger in self.timer.due(now):
            self.offer(trigger, now)
        for miss in self.timer.take_missed():
            self.store.events.append("schedule_missed", now, **miss)
        for watcher in self.change_watchers.values():
            # poll() restarts its own watcher thread when it died, with a rescan.
            for trigger in watcher.poll(now):
                self.offer(trigger, now)
        self._cancel_queued(now)
        self._housekeeping(now)
        if self.workers or self._reap_pending:
            # Orphans of what runs started (re-parented to loopd, the subreaper) are reaped.
            reap_orphans()
            self._reap_pending = bool(self.workers)
        self._reap()
        if not self.flags.stop.is_set():
            self._start_ready(now)
        self.write_status(now)

    def _housekeeping(self, now: datetime) -> None:
        """Prune old runs at start and once a day (`retain_days`)."""
        from daemon.housekeeping import prune

        assert self.store is not None and self.loaded is not None
        last = getattr(self, "_pruned_at", None)
        if last is not None and now - last < timedelta(days=1):
            return
        self._pruned_at = now
        repos = {name: loop.config.repo_path for name, loop in self.loops.items()}
        keep = {w.run_id for w in self.workers.values()}
        retain_days = self.loaded.daemon.limits.retain_days
        store, services, rules_dir = self.store, self.services, self.home.rules_dir

        def housekeeping() -> None:
            # In its own thread: a first prune of thousands of runs takes many seconds,
            # and the tick must keep taking triggers and signals meanwhile.
            try:
                prune(store, repos, retain_days, now, keep=keep, rules_dir=rules_dir)
            except Exception as exc:  # noqa: BLE001 - housekeeping never stops the daemon
                self._event("prune_failed", error=str(exc)[:500])
            try:
                from daemon.rules.promotion import retire_stale
                from daemon.runs.learning import rule_library

                assert services is not None
                retire_stale(rule_library(services), store.events, now, state_root=store.root)
            except Exception as exc:  # noqa: BLE001 - housekeeping never stops the daemon
                self._event("retire_failed", error=str(exc)[:500])

        thread = getattr(self, "_housekeeper", None)
        if thread is not None and thread.is_alive():
            return
        self._housekeeper = threading.Thread(target=housekeeping, name="housekeeping", daemon=True)
        self._housekeeper.start()

    def _cancel_queued(self, now: datetime) -> None:
        """`loopd cancel` of a run still in the queue: it ends as `cancelled` without starting."""
        from daemon.runs.executor import end_without_agent, new_run

        assert self.store is not None and self.services is not None
        for pending in list(self.queue.pending()):
            if not self.store.cancel_requested(pending.id):
                continue
            self.queue.cancel_pending(pending.loop, pending.id)
            self.store.clear_cancel(pending.id)
            loop = self.loops.get(pending.loop)
            if loop is not None:
                run = new_run(self.services, loop, pending)
                end_without_agent(self.services, run, "cancelled", "cancelled while queued")
            else:
                self.store.events.append(
                    "run_finished",
                    now,
                    loop=pending.loop,
                    run=pending.id,
                    outcome="cancelled",
                    reason="cancelled while queued",
                )
            self._save_queue()

    def _busy_loops(self) -> set[str]:
        assert self.store is not None
        busy = set(self.store.paused_loops())
        for name in self.loops:
            if name not in self.workers and self.store.loop_lock(name).is_held():
                busy.add(name)  # `loopd once` is running it
        return busy

    def _start_ready(self, now: datetime) -> None:
        from daemon.runs.executor import new_run

        assert self.loaded is not None and self.store is not None and self.services is not None
        if not self.queue.pending():
            return
        limit = self.loaded.daemon.limits.max_concurrent_runs
        while len(self.workers) < limit:
            pending = self.queue.next_ready(limit, self._busy_loops() | set(self.workers))
            if pending is None:
                return
            loop = self.loops.get(pending.loop)
            if loop is None:
                self.queue.finished(pending.loop)
                continue
            lock = self.store.loop_lock(loop.name)
            try:
                lock.acquire()
            except LockHeld:
                # `loopd once` took the loop since `_busy_loops` looked: wait for it.
                self.queue.finished(pending.loop)
                self.queue.restore(pending)
                return
            self._launch(loop, new_run(self.services, loop, pending), lock)
            self._save_queue()

    def _launch(self, loop: Loop, run: Any, lock: HomeLock) -> None:
        """Run `run` in its own thread, holding the loop's lock until it ends."""
        from daemon.runs.executor import RunExecutor

        assert self.services is not None
        executor = RunExecutor(self.services, loop, run)

        def body() -> None:
            try:
                executor.execute()
            finally:
                lock.release()
                self.flags.wake.set()

        thread = threading.Thread(target=body, name=f"run-{run.id}", daemon=True)
        self.workers[loop.name] = Worker(
            loop=loop.name, run_id=run.id, thread=thread, executor=executor
        )
        self.queue.started(loop.name, run.id)
        thread.start()

    def _reap(self) -> None:
        for name, worker in list(self.workers.items()):
            if not worker.thread.is_alive():
                worker.thread.join()
                if worker.executor is not None and worker.executor.run.outcome:
                    self.note_finished(name, worker.run_id, worker.executor.run.outcome)
                del self.workers[name]
                self.queue.finished(name)

    # status --------------------------------------------------------------------
    def write_status(self, now: datetime, force: bool = False) -> None:
        """Rewrite status.toml when something changed, and at least every 10 s (heartbeat)."""
        assert self.store is not None and self.loaded is not None
        paused = self.store.paused_loops()
        status = StatusFile(
            daemon=DaemonStatus(
                pid=os.getpid(),
                version=package.__version__,
                started=self.started,
                heartbeat=now,
                running=not self.flags.stop.is_set(),
                warnings=list(self.loaded.warnings),
            )
        )
        last = self._last_outcomes()
        for name, loop in sorted(self.loops.items()):
            worker = self.workers.get(name)
            run = worker.executor.run if worker and worker.executor else None
            phase = run.phase if run else ("paused" if name in paused else "idle")
            if not run and self.queue.pending_count(name) and name not in paused:
                phase = "queued"
            status.loops[name] = LoopStatus(
                phase=phase,
                run=run.id if run else "",
                attempt=len(run.attempts) if run else 0,
                last_outcome=last.get(name, ("", ""))[1],
                last_run=last.get(name, ("", ""))[0],
                next_fire=self.timer.next_fire(name) if loop.config.enabled else None,
                paused=name in paused,
                enabled=loop.config.enabled,
                pending=self.queue.pending_count(name),
            )
        for error in self.loaded.errors:
            if error.file.parent.name == "loops" and error.file.stem not in status.loops:
                status.loops[error.file.stem] = LoopStatus(enabled=False, error=str(error))
        body = status.model_dump_json(exclude={"daemon": {"heartbeat"}})
        due = self._status_written is None or now - self._status_written >= HEARTBEAT_EVERY
        if force or due or body != self._status_cache:
            self.store.save_status(status)
            self._status_written = now
            self._status_cache = body

    def _last_outcomes(self) -> dict[str, tuple[str, str]]:
        """The newest finished run of each loop, from what this daemon knows."""
        cache = getattr(self, "_outcomes", None)
        if cache is None:
            assert self.store is not None
            cache = {}
            newest = self.store.last_run_ids()
            for name in self.loops:
                for run in self.store.iter_runs(name) if name in newest else ():
                    if run.outcome is not None:
                        cache[name] = (run.id, run.outcome)
                        break
            self._outcomes = cache
        for name, worker in self.workers.items():
            run = worker.executor.run if worker.executor else None
            if run is not None and run.outcome is not None:
                cache[name] = (run.id, run.outcome)
        return cache

    def note_finished(self, loop: str, run_id: str, outcome: str) -> None:
        if getattr(self, "_outcomes", None) is not None:
            self._outcomes[loop] = (run_id, outcome)

    # health, reload, stop -----------------------------------------------------
    def healthy(self) -> bool:
        """Scheduler, watchers and run workers alive: the systemd watchdog is fed only then."""
        import time

        if any(not w.alive() for w in self.watchers):
            return False
        now = time.monotonic()
        for worker in self.workers.values():
            if worker.executor is not None and worker.executor.wedged(now):
                return False
        return True

    def reload(self, now: datetime) -> str:
        """SIGHUP: read the configuration again; a broken one keeps the running configuration."""
        assert self.store is not None and self.services is not None
        try:
            loaded = self._load()
        except ConfigFatal as exc:
            self.store.events.append("reload_failed", now, error=str(exc)[:1000])
            return f"reload failed, keeping the running configuration: {exc}"
        self.loaded = loaded
        # Running runs keep the services (configuration, notifier) they started with.
        self.services = dataclasses.replace(
            self.services, config=loaded.daemon, notifications=self._notifications()
        )
        self._report_config(loaded, now)
        self.timer.update(self._scheduled_loops(), now)
        self._start_change_watchers()
        self.store.events.append("reloaded", now, loops=sorted(loaded.loops))
        self.write_status(now, force=True)
        return f"reloaded: {len(loaded.loops)} loop(s)"

    def stop(self, now: datetime, grace: float | None = None) -> None:
        """No new runs; running attempts get `shutdown_grace`, then are killed (interrupted)."""
        assert self.store is not None and self.loaded is not None
        self.flags.stop.set()
        if grace is None:
            grace = self.loaded.daemon.limits.shutdown_grace.total_seconds()
        for worker in self.workers.values():
            if worker.executor is not None:
                worker.executor.interrupt(grace)
        for worker in self.workers.values():
            worker.thread.join(timeout=grace + 30)
        for worker in self.workers.values():
            run = worker.executor.run if worker.executor else None
            if run is not None and run.outcome == "interrupted" and run.trigger.kind != "retry":
                # Picked up from the inbox by the next start, like a restart after a crash.
                self.store.put_trigger(
                    Trigger(
                        loop=run.loop,
                        kind="retry",
                        reason=f"retry of run {run.id}, interrupted by a stop",
                        retry_of=run.id,
                        ts=self.clock(),
                    )
                )
        for watcher in [*self.watchers, *self.change_watchers.values()]:
            watcher.stop()
        self._save_queue()
        housekeeper = getattr(self, "_housekeeper", None)
        if housekeeper is not None:
            housekeeper.join(timeout=30)
        if self.services is not None and self.services.notifications is not None:
            self.services.notifications.drain(10)
        self.write_status(self.clock(), force=True)
        self.store.events.append("daemon_stopped", self.clock(), pid=os.getpid())
        self.store.lock.release()

    def shutdown_now(self) -> None:
        """A second signal: stop waiting for running attempts."""
        for worker in self.workers.values():
            if worker.executor is not None:
                worker.executor.interrupt(0)


def report_failure(home: Home, exc: BaseException) -> None:
    """loopd cannot start: tell the person through [notify], if it can be read."""
    try:
        from daemon.people.notify import Notifications
        from daemon.state.store import StateStore

        loaded = home.load()
        store = StateStore(home.state_dir)
        Notifications(loaded.daemon.notify, store.events).daemon_failed(
            home.root, f"{type(exc).__name__}: {exc}", utc_now()
        )
    except Exception:  # noqa: BLE001 - the original error is what matters
        pass


def run_daemon(home: Home) -> int:
    """The driver: signals set flags; the loop ticks; systemd hears READY, WATCHDOG, STOPPING."""
    from daemon.systemd import SystemdNotifier

    daemon = Daemon(home)
    flags = daemon.flags

    def on_stop(signum: int, _frame: Any) -> None:
        flags.stops += 1
        flags.stop.set()
        flags.wake.set()

    def on_reload(signum: int, _frame: Any) -> None:
        flags.reload.set()
        flags.wake.set()

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGHUP, on_reload)
    daemon.start(utc_now())
    enabled = sorted(n for n, loop in daemon.loops.items() if loop.config.enabled)
    print(
        f"loopd {package.__version__} running for {home.root} (pid {os.getpid()}): "
        f"{len(enabled)} enabled loop(s){': ' + ', '.join(enabled) if enabled else ''}; "
        "Ctrl-C or SIGTERM stops it",
        flush=True,
    )
    assert daemon.loaded is not None
    for error in daemon.loaded.errors:
        print(f"loopd: loop disabled: {error}", file=sys.stderr, flush=True)
    for warning in daemon.loaded.warnings:
        print(f"loopd: warning: {warning}", file=sys.stderr, flush=True)
    # Agents must not inherit the socket: it would let them speak for loopd.
    notifier = SystemdNotifier.from_env(unset_environment=True)
    if notifier:
        notifier.ready()
        notifier.status(f"{len(daemon.loops)} loop(s)")
    ping_every = (notifier.watchdog_interval() or 0) / 2 if notifier else 0
    last_ping = 0.0
    failures = 0
    import time

    while not flags.stop.is_set():
        flags.wake.wait(timeout=1.0)
        flags.wake.clear()
        if flags.reload.is_set():
            flags.reload.clear()
            if notifier:
                notifier.reloading()
            message = daemon.reload(utc_now())
            print(f"loopd: {message}", flush=True)
            if notifier:
                notifier.ready()
                notifier.status(message)
        if flags.stop.is_set():
            break
        try:
            daemon.tick(utc_now())
            failures = 0
        except Exception as exc:  # noqa: BLE001 - a bad tick is recorded; the daemon goes on
            failures += 1
            daemon._event("tick_error", error=f"{type(exc).__name__}: {exc}"[:1000])
            if failures == 3 and daemon.services and daemon.services.notifications:
                daemon.services.notifications.daemon_failed(
                    home.root, f"{type(exc).__name__}: {exc}", utc_now(), wait=0
                )
        if notifier and ping_every and time.monotonic() - last_ping >= ping_every:
            if daemon.healthy():
                notifier.watchdog()
                last_ping = time.monotonic()
    if notifier:
        notifier.stopping()
        if daemon.workers:
            # Running attempts get their grace, then the kill: more than TimeoutStopSec may hold.
            grace = daemon.loaded.daemon.limits.shutdown_grace.total_seconds()
            notifier.extend_timeout(grace + 60)
    stopper = threading.Thread(target=daemon.stop, args=(utc_now(),), daemon=True)
    stopper.start()
    print("loopd: stopping; running attempts get their shutdown grace", flush=True)
    while stopper.is_alive():
        stopper.join(timeout=0.2)
        if flags.stops > 1:
            daemon.shutdown_now()
    print("loopd: stopped", flush=True)
    return 0
