"""The daemon: `tick(now)` takes due work; a thin driver calls it; signals only set flags.

Its parts live in daemon/service/, each built once by `Daemon.start()`: the intake (triggers
in, the queue file), the worker pool, the watchers, recovery, the status board and the
housekeeper. They share one `Context`; a reload replaces its configuration and services.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from daemon.allocator import Trimmer, limit_arenas
from daemon.clock import utc_now
from daemon.config import DaemonConfig, Loop
from daemon.home import Home
from daemon.people.escalation import open_escalations
from daemon.people.notify import Notifications
from daemon.processes import set_child_subreaper, set_not_dumpable
from daemon.sandbox.limits import sweep_stale_groups
from daemon.scheduling.queue import RunQueue
from daemon.scheduling.timer import FIRE_LEAD, CronTimer
from daemon.service.banner import announce
from daemon.service.context import (
    ConfigFatal,
    Context,
    Flags,
    load_config,
    notifications_for,
    started_context,
    unreadable_reporter,
)
from daemon.service.first_run import FirstRun
from daemon.service.floor import Floor
from daemon.service.holds import Holds
from daemon.service.housekeeper import Housekeeper
from daemon.service.intake import Intake
from daemon.service.outside import Outside
from daemon.service.recover import recover_live_runs
from daemon.service.reload import (
    LoopFiles,
    agent_could_write_home,
    broken_loop_files,
    changed_loops,
    keep_last_good,
    keep_running,
    reload_message,
    restart_messages,
    restart_pending,
)
from daemon.service.skips import SKIPS_FILE
from daemon.service.status import StatusBoard
from daemon.service.stopdeadline import StopDeadline, agent_grace
from daemon.service.stopping import StopWait
from daemon.service.verifier import VerifierWatch
from daemon.service.watchers import Watchers
from daemon.service.workers import WorkerPool
from daemon.state.eventtypes import Event
from daemon.state.readme import write_state_readme
from daemon.state.records import Trigger
from daemon.state.store import StateStore
from daemon.systemd import Heartbeat, SystemdNotifier

__all__ = ["ConfigFatal", "Daemon", "Flags", "report_failure", "run_daemon"]

# The driver ticks at least this often (watchers, reaping, status) when nothing wakes it.
POLL_SECONDS = 1.0


class Daemon:
    """One started daemon per home; every part exists from `start()` on."""

    def __init__(
        self,
        ctx: Context,
        timer: CronTimer,
        intake: Intake,
        pool: WorkerPool,
        watchers: Watchers,
        status: StatusBoard,
        housekeeper: Housekeeper,
        first_run: FirstRun,
        holds: Holds,
        verifier: VerifierWatch,
        outside: Outside,
    ) -> None:
        self.ctx = ctx
        self.outside = outside
        self.timer = timer
        self.intake = intake
        self.pool = pool
        self.watchers = watchers
        self.status = status
        self.housekeeper = housekeeper
        self.first_run = first_run
        self.holds = holds
        self.verifier = verifier
        self.floor = Floor(ctx)  # a full state/: the tick waits, the person is told once
        self._ticked: datetime | None = None  # the `now` of the last tick begun
        self.trimmer = Trimmer()  # the pages a finished run's thread freed go back (#41)
        intake.reload = self.reload  # a trigger for a loop file newer than the configuration

    @property
    def loops(self) -> dict[str, Loop]:
        return self.ctx.loops

    @property
    def flags(self) -> Flags:
        return self.ctx.flags

    # start -------------------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        home: Home,
        now: datetime,
        flags: Flags | None = None,
        clock: Callable[[], datetime] = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
        ui: Callable[[Home, Callable[[], bool]], Any] | None = None,
    ) -> Daemon:
        """Take the home's lock, restore the queue, recover what a dead daemon left, watch;
        `ui(home)`: the console's app for `[listen] ui = true`."""
        loaded = load_config(home)  # ConfigFatal: exit 2 with the reason
        store = _locked_store(home, loaded)
        set_child_subreaper()
        ctx = started_context(home, loaded, store, flags or Flags(), clock, monotonic)
        queue = RunQueue()
        # Fires handed out FIRE_LEAD ahead: each agent is let go at its scheduled second.
        timer = CronTimer(store.root / "schedule.toml", store.report_unreadable, FIRE_LEAD)
        pool = WorkerPool(ctx, queue)
        intake = Intake(ctx, queue, timer, pool.running, store.root / SKIPS_FILE)
        intake.restore()
        # Recovery first: a retry of an interrupted run is queued before any catch-up fire,
        # so the overlap policy never skips it for the catch-up's sake.
        recover_live_runs(ctx, now, pool.resume, intake.offer)
        sweep_stale_groups()  # what a daemon killed with -9 left in the control groups
        intake.start_schedule(now)
        first_run = FirstRun(ctx, now)
        first_run.start(intake, now)
        intake.save()
        watchers = Watchers.start(ctx, pool.running)
        holds = Holds(ctx)
        verifier = VerifierWatch(ctx)
        status = StatusBoard(ctx, queue, timer, pool, started=now, holds=holds, verifier=verifier)
        status.write(now, force=True)
        made: list[Daemon] = []
        outside = Outside.start(
            ctx,
            now,
            gauges=lambda: _gauges(ctx, queue, pool),
            healthy=lambda: bool(made) and made[0].healthy(),
            ui=ui,
        )
        made.append(
            cls(
                ctx,
                timer,
                intake,
                pool,
                watchers,
                status,
                Housekeeper(ctx),
                first_run,
                holds,
                verifier,
                outside,
            )
        )
        return made[0]

    # the tick ----------------------------------------------------------------------------
    def tick(self, now: datetime) -> None:
        """Take due work: inbox, cron, file changes, cancels; start ready runs; write status."""
        self._ticked = now
        more = self.intake.take_inbox(now)
        self.intake.take_schedule(now)
        for trigger in self.watchers.poll(now):
            self.intake.offer(trigger, now)
        self.intake.cancel_queued()
        reaped = False
        for run in self.pool.reap():
            reaped = True
            self.status.note_finished(run)
            self.holds.recount()  # its tokens count before the next run starts
        if reaped:
            self.trimmer.after_runs(self.ctx.monotonic())
        if not self.flags.stop.is_set() and self.intake.queue.pending():
            self.pool.start_ready(now, held=self.holds.held(now))
        self.verifier.tick(now)
        self.intake.save()
        self.housekeeper.tick(now, keep=self.pool.run_ids())
        self.status.write(now)
        self.outside.ticked()
        if more:
            self.flags.wake.set()  # the rest of a burst: the next tick comes at once

    def sleep_for(self, now: datetime) -> float:
        """Seconds the driver may sleep: until the next poll or the timer's next wake, if sooner.

        A fire is a timer of its own, not a poll: handed out FIRE_LEAD ahead (the run prepared
        meanwhile, its agent let go at the second). Signals, reloads, the inbox wake it sooner.
        """
        fire = self.timer.next_wake()
        if fire is None or (self._ticked is not None and fire <= self._ticked):
            # No schedule, or a tick saw this fire and could not take it (a failing tick):
            # the poll's pace, never a spin.
            return POLL_SECONDS
        return max(0.0, min(POLL_SECONDS, (fire - now).total_seconds()))

    # health, reload, stop ------------------------------------------------------------------
    def healthy(self) -> bool:
        """Watchers and run workers alive: the systemd watchdog is fed only then."""
        return (
            self.watchers.alive()
            and self.outside.alive()
            and self.pool.healthy(self.ctx.monotonic())
        )

    def reload(self, now: datetime) -> str:
        """SIGHUP, `loopd reload`, a changed file: read the configuration again, loop by loop.

        A broken loop file keeps its loop's last good configuration (stale); a broken
        loopd.toml keeps everything; running runs keep the configuration they started with.
        """
        ctx = self.ctx
        # `loopd reload` waits for the event naming its request; taken before the files are
        # read, so the reload that names it read what the person had saved.
        requests = ctx.store.take_reload_requests()
        try:
            loaded = load_config(ctx.home)
        except ConfigFatal as exc:
            ctx.config_error = str(exc)[:1000]
            ctx.event(Event.RELOAD_FAILED, error=str(exc)[:1000], requests=requests)
            self.status.write(now, force=True)
            return f"reload failed, keeping the running configuration: {exc}"
        pending = restart_messages(restart_pending(ctx.config.daemon, loaded.daemon))
        loaded.daemon = keep_running(ctx.config.daemon, loaded.daemon)
        before = (ctx.config, ctx.services, ctx.files, ctx.config_error)
        files = keep_last_good(ctx.home, ctx.config, ctx.files, loaded)
        try:
            ctx.config = loaded
            ctx.files = files
            ctx.config_error = ""
            # Running runs keep the services (configuration, notifier) they started with.
            ctx.services = dataclasses.replace(
                ctx.services,
                config=loaded.daemon,
                notifications=notifications_for(loaded, ctx.store),
            )
            ctx.store.events.rotate_bytes = loaded.daemon.limits.events_rotate
            self.timer.update(ctx.scheduled_loops(), now)
            self.watchers.restart_changes()
        except Exception as exc:  # noqa: BLE001 - a reload never kills the daemon
            ctx.config, ctx.services, ctx.files, ctx.config_error = before
            self._reapply(now)
            error = f"{type(exc).__name__}: {exc}"
            ctx.event(Event.RELOAD_FAILED, error=error[:1000], requests=requests)
            return f"reload failed, keeping the running configuration: {error}"
        ctx.report_config()
        self.holds.recount()  # budgets and their time zone apply at once
        if pending and pending != ctx.restart_pending:
            ctx.event(Event.RESTART_NEEDED, changes=pending)
        ctx.restart_pending = pending
        changed = changed_loops(before[2], files)
        self._changes_during_attempts(before[2], files, changed)
        broken = broken_loop_files(ctx.home, loaded)
        ctx.event(
            Event.RELOADED,
            loops=sorted(loaded.loops),
            changed=changed,
            stale=sorted(files.stale),
            not_loaded=broken,
            restart=pending,
            requests=requests,
        )
        self.status.write(now, force=True)
        return reload_message(loaded, pending, files, broken)

    def _changes_during_attempts(self, before: LoopFiles, after: LoopFiles, changed: list[str]):
        """Record configuration changes an agent working now could have made."""
        ctx = self.ctx
        if not agent_could_write_home(ctx.config.daemon):
            return
        files = [str(ctx.home.loops_dir / f"{name}.toml") for name in changed]
        if before.config_digest != after.config_digest:
            files.insert(0, str(ctx.home.config_path))
        running = [w.run for w in self.pool.workers.values() if w.run.phase == "running"]
        if files and running:
            ctx.event(
                Event.CONFIG_CHANGED_DURING_ATTEMPT,
                files=files,
                runs=[run.id for run in running],
                loops=sorted({run.loop for run in running}),
            )

    def _reapply(self, now: datetime) -> None:
        """After a failed reload: the timer and watchers follow the kept configuration."""
        try:
            self.ctx.store.events.rotate_bytes = self.ctx.config.daemon.limits.events_rotate
            self.timer.update(self.ctx.scheduled_loops(), now)
            self.watchers.restart_changes()
        except Exception as exc:  # noqa: BLE001 - recorded; the daemon goes on
            self.ctx.event(Event.RELOAD_FAILED, error=f"restoring: {type(exc).__name__}: {exc}")

    def stop(self, now: datetime, grace: float | None = None) -> None:
        """No new runs; running attempts get `shutdown_grace`, then are killed (interrupted)."""
        ctx = self.ctx
        ctx.flags.stop.set()
        if grace is None:
            grace = ctx.config.daemon.limits.shutdown_grace.total_seconds()
        for run in self.pool.stop(agent_grace(grace)):
            if run.trigger.kind != "retry":
                # Picked up from the inbox by the next start, like a restart after a crash.
                ctx.store.put_trigger(
                    Trigger(
                        loop=run.loop,
                        kind="retry",
                        reason=f"retry of run {run.id}, interrupted by a stop",
                        retry_of=run.id,
                        ts=ctx.clock(),
                    )
                )
        self.watchers.stop()
        self.outside.stop()
        self.intake.skips.end_all()
        self.intake.save()
        self.housekeeper.join(timeout=30)
        if ctx.services.notifications is not None:
            ctx.services.notifications.drain(10)
        self.status.write(ctx.clock(), force=True)
        ctx.event(Event.DAEMON_STOPPED, pid=os.getpid())
        ctx.store.lock.release()

    def shutdown_now(self) -> None:
        """A second signal: stop waiting for running attempts."""
        self.pool.shutdown_now()


def _gauges(ctx: Context, queue: RunQueue, pool: WorkerPool) -> dict[str, float]:
    """What /metrics reads of the daemon at a scrape."""
    runs = [w.run for w in list(pool.workers.values())]
    return {
        "queue_depth": len(queue.pending()),
        "running_runs": sum(1 for run in runs if run.phase != "waiting"),
        "parked_runs": sum(1 for run in runs if run.phase == "waiting"),
        "open_escalations": len(open_escalations(ctx.store)),
    }


def report_failure(home: Home, exc: BaseException) -> None:
    """loopd cannot start: tell the person through [notify], if it can be read."""
    try:
        loaded = home.load()
        store = StateStore(home.state_dir)
        Notifications(loaded.daemon.notify, store.events).daemon_failed(
            home.root, f"{type(exc).__name__}: {exc}", utc_now()
        )
    except Exception:  # noqa: BLE001 - the original error is what matters
        pass


def _install_signals(flags: Flags) -> None:
    """Signal handlers only set flags; the driver acts on them."""

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


def _locked_store(home: Home, loaded: Any) -> StateStore:
    """The home's state, its lock taken (LockHeld propagates: exit 2 naming the pid), its
    event log repaired and its README written."""
    store = StateStore(home.state_dir, loaded.daemon.limits.events_rotate)
    store.warn = unreadable_reporter(store)
    store.lock.acquire()
    store.events.repair()
    write_state_readme(store.root)
    return store


def run_daemon(home: Home, ui: Callable[[Home, Callable[[], bool]], Any] | None = None) -> int:
    """The driver: signals set flags; the loop ticks; systemd hears READY, WATCHDOG, STOPPING.
    `ui(home)`: the console's app, served under /ui/ with `[listen] ui = true`."""
    # Agents and checks run as this user: they must not read loopd's memory or environment.
    set_not_dumpable()
    # Before any thread starts: each run's thread would otherwise get an arena of its own.
    limit_arenas()
    flags = Flags()
    _install_signals(flags)
    # Until the configuration is read, the default grace; then the configured one.
    started: list[Daemon] = []
    default_grace = DaemonConfig().limits.shutdown_grace.total_seconds()
    deadline = StopDeadline(
        lambda: _grace(started[0]) if started else default_grace,
        "loopd run",
        lambda: _left(started[0]) if started else "",
    )
    deadline.install()
    daemon = Daemon.start(home, utc_now(), flags, ui=ui)
    started.append(daemon)
    announce(home, daemon.ctx, daemon.loops, daemon.outside.listener)
    # Agents must not inherit the socket: it would let them speak for loopd.
    notifier = SystemdNotifier.from_env(unset_environment=True)
    if notifier:
        notifier.ready()
        notifier.status(f"{len(daemon.loops)} loop(s)")
    heartbeat = Heartbeat(notifier, healthy=daemon.healthy)
    failures = 0
    while not flags.stop.is_set():
        # Re-armed each time round: a reload or a tick that handled a fire moves the next one.
        flags.wake.wait(timeout=daemon.sleep_for(utc_now()))
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
        failures = _tick(home, daemon, failures)
        heartbeat.beat(time.monotonic())
    if notifier:
        notifier.stopping()
        if daemon.pool.workers:
            # Running attempts get their grace, then the kill: more than TimeoutStopSec may hold.
            grace = daemon.ctx.config.daemon.limits.shutdown_grace.total_seconds()
            notifier.extend_timeout(grace + 60)
    waiting = StopWait(daemon.pool, flags, _grace(daemon))
    stopper = threading.Thread(target=daemon.stop, args=(utc_now(),), daemon=True)
    stopper.start()
    waiting.wait(stopper, hurry=daemon.shutdown_now)
    deadline.done()
    print("loopd: stopped", flush=True)
    return 0


def _tick(home: Home, daemon: Daemon, failures: int) -> int:
    """One tick, and the first run's end when it came; a failed tick is recorded (the third
    in a row notifies). The failures in a row after it. A full `state/` is no failure: the
    tick waits for room (daemon/service/floor.py)."""
    if daemon.floor.blocked(utc_now()):
        return failures
    try:
        daemon.tick(utc_now())
        failures = 0
        if daemon.first_run.waiting:
            for line in daemon.first_run.ended(utc_now()):
                print(line, flush=True)
    except Exception as exc:  # noqa: BLE001 - a bad tick is recorded; the daemon goes on
        if daemon.floor.hit(exc, utc_now(), "the daemon's tick"):
            return failures
        failures += 1
        try:
            daemon.ctx.event(Event.TICK_ERROR, error=f"{type(exc).__name__}: {exc}"[:1000])
        except OSError as written:  # the record of a failure must not be the daemon's end
            daemon.floor.hit(written, utc_now(), "the event tick_error")
        notifications = daemon.ctx.services.notifications
        if failures == 3 and notifications is not None:
            notifications.daemon_failed(
                home.root, f"{type(exc).__name__}: {exc}", utc_now(), wait=0
            )
    return failures


def _grace(daemon: Daemon) -> float:
    return daemon.ctx.config.daemon.limits.shutdown_grace.total_seconds()


def _left(daemon: Daemon) -> str:
    """What a stop past its deadline leaves, for the last line printed."""
    runs = sorted(w.run_id for w in list(daemon.pool.workers.values()))
    if not runs:
        return ""
    return f"run(s) {', '.join(runs)} stay as they were; the next start ends them as interrupted"
