"""`loopd once`, `trigger`, `cancel`, `runs`, `show`: runs, started and read."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Any

from daemon.cli.common import CommandError, daemon_pid, engine_control, home_of, valid_loop
from daemon.cli.engine_views import trigger_on_engine
from daemon.cli.queued import report_run_id
from daemon.cli.runview import exit_code, print_outcome
from daemon.clock import utc_now
from daemon.config import LoadedConfig, Loop
from daemon.example import is_example_repo
from daemon.example.prepare import prepare_example
from daemon.git.safe import GitError
from daemon.home import Home
from daemon.people.notify import Notifications, NotifyError
from daemon.processes import set_child_subreaper, set_not_dumpable
from daemon.runparts.services import RunServices
from daemon.runs.budget import loop_hold
from daemon.sandbox.registry import choose
from daemon.scheduling.queue import PendingRun
from daemon.service.stopdeadline import StopDeadline, agent_grace
from daemon.service.tracing import start_tracing
from daemon.state.events import EventTail
from daemon.state.eventtypes import Event
from daemon.state.lock import LockHeld
from daemon.state.records import Trigger
from daemon.state.store import UnreadableFile


def foreground_loop(args: argparse.Namespace) -> tuple[Home, LoadedConfig, Loop]:
    """The home, its configuration and the loop a foreground command (`once`, `experiment`)
    runs; this process made undumpable first."""
    # The agent and the checks run as this user: they must not read this process's secrets.
    set_not_dumpable()
    home = home_of(args)
    loaded = home.load()
    if not loaded.daemon_ok:
        raise CommandError("\n".join(str(e) for e in loaded.errors if e.file == home.config_path))
    return home, loaded, valid_loop(home, loaded, args.loop)


def lock_loop(store: Any, loop: Loop) -> Any:
    """The loop's lock, taken; a usage error while another process runs the loop."""
    lock = store.loop_lock(loop.name)
    try:
        lock.acquire()
    except LockHeld as exc:
        raise CommandError(f"loop {loop.name!r} is running now ({exc})") from None
    return lock


def _refuse_unrunnable(home: Home, loaded: LoadedConfig, loop: Loop, force: bool) -> None:
    """A usage error when the engine runs the loop, or it is disabled and not forced, or
    it cannot run."""
    if engine_control(home, loaded) is not None:
        raise CommandError(
            f"with [engine] kind = {loaded.daemon.engine.kind!r} the engine runs loop "
            f"{loop.name!r}; use `loopd trigger {loop.name} --wait` to run it there"
        )
    if loop.config.enabled:
        return
    if not force:
        raise CommandError(
            f"loop {loop.name!r} is disabled (enabled = false in {loop.path}); set "
            f"enabled = true there, or run it this once anyway: `loopd once {loop.name} "
            "--force`"
        )
    if loop.problems:
        raise CommandError(
            f"loop {loop.name!r} cannot run:\n  " + "\n  ".join(str(e) for e in loop.problems)
        )


def _prepare_example(loop: Loop) -> None:
    """The example's repository made ready, when the loop runs on it."""

    if not is_example_repo(loop.config.repo_path):
        return

    try:
        prepare_example(loop.config.repo_path)
    except (GitError, OSError) as exc:
        raise CommandError(
            f"cannot prepare the example's repository {loop.config.repo_path}: {exc}"
        ) from None


def _refuse_daemon_loop(home: Home, store: Any, loop: Loop) -> None:
    """A usage error when the running daemon runs this loop itself."""
    pid = daemon_pid(home)
    if pid is not None and loop.config.enabled and loop.name not in store.paused_loops():
        raise CommandError(
            f"the daemon (pid {pid}) runs loop {loop.name!r}; use `loopd trigger {loop.name} "
            "--wait` to run it through the daemon, or `loopd pause` it first"
        )


def _warn(loaded: LoadedConfig, loop: Loop, services: Any) -> None:
    """Print the configuration's warnings, other loops' errors and the sandbox's summary."""

    for warning in loaded.warnings:
        print(f"loopd: warning: {warning}", file=sys.stderr)
        services.event(Event.CONFIG_WARNING, message=warning)
    for error in loaded.errors:
        if error.file != loop.path:  # another loop's file: named, and left out as the daemon does
            print(f"loopd: warning: {error} (that loop is left out)", file=sys.stderr)
    sandbox = choose(loaded.daemon.sandbox)
    if sandbox.warning or sandbox.refusal:
        print(f"loopd: warning: {sandbox.summary()}", file=sys.stderr)


def _new_run(services: Any, loop: Loop, args: argparse.Namespace, now: Any) -> Any:
    """The run record of a new manual run, its trigger recorded."""
    from daemon.runs.executor import new_run

    trigger = Trigger(
        loop=loop.name,
        kind="manual",
        reason=args.reason or "loopd once",
        ts=now,
        force=args.force,
    )
    services.event(Event.TRIGGER, loop=loop.name, kind="manual", reason=trigger.reason, via="once")
    pending = PendingRun(
        id=services.store.new_run_id(loop.name, now), loop=loop.name, trigger=trigger, queued_at=now
    )
    return new_run(services, loop, pending)


def _execute(services: Any, loaded: LoadedConfig, loop: Loop, run: Any, lock: Any) -> Any:
    """Execute the run in the foreground: a signal stops it, a second one at once."""
    from daemon.runs.executor import RunExecutor

    executor = RunExecutor(services, loop, run)
    grace = loaded.daemon.limits.shutdown_grace.total_seconds()
    presses = []

    def on_signal(signum: int, _frame: Any) -> None:
        presses.append(signum)
        executor.interrupt(agent_grace(grace) if len(presses) == 1 else 0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # Whatever hangs (a model call, a git command), the process ends past the grace.
    deadline = StopDeadline(
        lambda: grace,
        "loopd once",
        lambda: (
            f"run {run.id} stays in phase {executor.run.phase}; the next `loopd once "
            f"{loop.name}` or `loopd run` ends it as interrupted"
        ),
    )
    deadline.install()
    try:
        return executor.execute()
    finally:
        lock.release()
        if services.notifications is not None:
            # Deliveries run in threads; the process must not end under them.
            services.notifications.drain(20)
        deadline.done()


def once(args: argparse.Namespace) -> int:
    """One full run now in the foreground; prints RUN_ID on its first line."""

    home, loaded, loop = foreground_loop(args)
    _refuse_unrunnable(home, loaded, loop, args.force)
    _prepare_example(loop)
    store = home.state(loaded.daemon.limits.events_rotate)
    _refuse_daemon_loop(home, store, loop)
    lock = lock_loop(store, loop)
    set_child_subreaper()
    services = RunServices(home=home, config=loaded.daemon, store=store)
    parked = _finish_abandoned(services, loop)
    services.notifications = _notifications(loaded, store)
    _warn(loaded, loop, services)
    now = utc_now()
    if parked is not None:
        # A run parked on a usage limit (by a stopped daemon or `loopd once`) goes on first.
        run = parked
        print(run.id, flush=True)
        print(f"loopd: resuming run {run.id}, parked on a usage limit", file=sys.stderr)
    else:
        hold = _hold(services, loop, now)
        if hold is not None:
            lock.release()
            print(f"not run: {hold.why}; new runs of {loop.name} wait {hold.wait_text()}")
            return 1
        run = _new_run(services, loop, args, now)
        print(run.id, flush=True)
    told: list[str] = []
    services.on_park = lambda parked: told.append(_tell_parked(parked, loop.name))
    tracing = start_tracing(loaded.daemon.telemetry, store)  # [telemetry]: the run's trace
    try:
        run = _execute(services, loaded, loop, run, lock)
    finally:
        if tracing is not None:
            tracing.close()
    if run.outcome is None and run.phase == "waiting":
        if not told:
            print(
                f"parked: {run.id} waits for a usage limit until {run.resume_at}; the daemon "
                f"or the next `loopd once {loop.name}` resumes it"
            )
        return 1
    print_outcome(run)
    return exit_code(run)


def _tell_parked(run: Any, loop: str) -> str:
    """The `parked:` line, printed as the run parks: the wait is in the foreground."""
    line = (
        f"parked: {run.id} waits for a usage limit until {run.resume_at}; this `loopd once` "
        f"waits for it (Ctrl-C stops waiting and leaves the run parked; the daemon or the "
        f"next `loopd once {loop}` resumes it)"
    )
    print(line, flush=True)
    return line


def _hold(services: Any, loop: Loop, now: Any) -> Any:
    """Why the loop's new runs wait now (its profile's usage limit, a spent budget), or None."""
    return loop_hold(services.store, services.config, loop, now)


def _finish_abandoned(services: Any, loop: Loop) -> Any:
    """Runs of this loop that a killed `loopd once` left: kill their leftovers, end them.

    A run parked on a usage limit is not ended: the newest is returned, to be resumed.
    """
    from daemon.runs.finish import complete_finish, finish_interrupted, kill_run_leftovers

    store = services.store
    parked = None
    for run_id in store.live_runs():
        try:
            run = store.load_run(run_id)
        except FileNotFoundError:
            continue
        except Exception as exc:  # noqa: BLE001 - unreadable: nothing to finish
            print(f"loopd: warning: {exc}; skipped", file=sys.stderr)
            continue
        if run.loop != loop.name:
            continue
        if run.outcome is None and run.phase == "waiting" and run.park is not None:
            parked = run  # live runs sort by id: the newest wins
            continue
        try:
            if run.outcome is not None:
                # Killed while finishing it: complete what finishing had not done.
                complete_finish(services, run, notify_on=loop.config.notify_on, config=loop.config)
                continue
            kill_run_leftovers(services, run)
            finish_interrupted(services, loop, run, "the loopd that ran it was stopped or killed")
        except Exception as exc:  # noqa: BLE001 - one broken run must not stop this one
            print(f"loopd: could not end abandoned run {run.id}: {exc}", file=sys.stderr)
            continue
        print(f"loopd: ended abandoned run {run.id} as interrupted", file=sys.stderr)
    return parked


def _notifications(loaded: LoadedConfig, store: Any) -> Any:
    try:
        return Notifications(loaded.daemon.notify, store.events)
    except NotifyError as exc:
        raise CommandError(str(exc), code=2) from None


def trigger(args: argparse.Namespace) -> int:
    """Queue a run for the daemon and print its RUN_ID; --wait: exit as the run ends."""
    home = home_of(args)
    loaded = home.load()
    control = engine_control(home, loaded)
    if control is not None:
        return trigger_on_engine(control, args)
    if loaded.daemon_ok:
        try:
            name = valid_loop(home, loaded, args.loop).name
        except CommandError:
            if not _daemon_keeps(home, args.loop):
                raise
            # The running daemon keeps the loop's last good configuration: that runs.
            for error in loaded.errors:
                if error.file == home.loops_dir / f"{args.loop}.toml":
                    print(f"loopd: warning: {error}", file=sys.stderr)
            print(
                f"loopd: warning: the daemon runs {args.loop!r} with its last good "
                "configuration until the file is fixed",
                file=sys.stderr,
            )
            name = args.loop
    else:
        # A running daemon keeps the configuration it has; the trigger is still for it.
        for error in loaded.errors:
            if error.file == home.config_path:
                print(f"loopd: warning: {error}", file=sys.stderr)
        if not (home.loops_dir / f"{args.loop}.toml").is_file():
            raise CommandError(f"unknown loop {args.loop!r} (no {home.loops_dir}/{args.loop}.toml)")
        name = args.loop
    store = home.state(loaded.daemon.limits.events_rotate)
    pid = daemon_pid(home)
    if args.wait and pid is None:
        raise CommandError(
            f"no daemon runs for {home.root}; start it with `loopd --home {home.root} run`, "
            f"or run the loop in the foreground with `loopd once {name}`"
        )
    now = utc_now()
    trig = Trigger(
        loop=name, kind="manual", reason=args.reason or "loopd trigger", ts=now, force=args.force
    )
    # Followed from before the trigger exists: the daemon's answer cannot be missed.
    tail = EventTail(store.events.path)
    path = store.put_trigger(trig)
    if not args.wait:
        return report_run_id(home, tail, path.name, name)
    return _wait_for(home, store, tail, path.name)


def _daemon_keeps(home: Home, name: str) -> bool:
    """Whether the running daemon holds a loaded configuration of `name` (kept stale)."""
    if daemon_pid(home) is None:
        return False
    entry = home.state().load_status().loops.get(name)
    return entry is not None and entry.loaded and entry.stale


def _wait_for(home: Home, store: Any, tail: Any, inbox_id: str) -> int:
    """Follow the events until the run holding `inbox_id` ends (or the trigger is skipped).

    The daemon names the run in the trigger's event, whether the trigger made a new pending
    run or was merged into one queued earlier (whose id is older than the trigger).
    """
    run_id = None
    ended: dict[str, Any] = {}  # the run's `run_finished` event
    while True:
        for event in tail.read():
            if run_id is None and event.get("inbox") == inbox_id:
                if event.get("type") == Event.TRIGGER_SKIPPED:
                    print(f"trigger {inbox_id} was skipped: {event.get('why', 'overlap policy')}")
                    return 1
                if event.get("type") in (Event.TRIGGER, Event.TRIGGER_MERGED) and event.get("run"):
                    run_id = event["run"]
                    print(run_id, flush=True)
            elif run_id is not None and event.get("run") == run_id:
                if event.get("type") == Event.RUN_FINISHED:
                    ended = event
        if run_id is not None:
            try:
                run = store.load_run(run_id)
            except FileNotFoundError:
                if ended:  # it ended while queued, without a record
                    print(f"{ended.get('outcome')}: {ended.get('reason', '')}")
                    return 1
                run = None  # still queued
            except UnreadableFile as exc:
                raise CommandError(str(exc), code=1) from None
            # Ended once finished: its escalation and notifications are done, it is not live.
            if run is not None and run.outcome is not None and run_id not in store.live_runs():
                print_outcome(run)
                return exit_code(run)
        if daemon_pid(home) is None:
            raise CommandError("the daemon stopped before the run ended")
        time.sleep(0.2)


def _cancel_event(store: Any, args: argparse.Namespace, loop: str | None) -> None:
    """Who asked the run to stop: `by` is the console's; the command line's event has none."""
    by = getattr(args, "by", "")
    store.events.append(
        Event.CANCEL_REQUESTED, utc_now(), loop=loop, run=args.run_id, **({"by": by} if by else {})
    )


def cancel(args: argparse.Namespace) -> int:
    """Stop a queued or running run; its outcome is `cancelled`."""
    home = home_of(args)
    control = engine_control(home)
    if control is not None:
        code, message = control.cancel(args.run_id)
        if code == 2:
            raise CommandError(message)
        if code == 0:
            _cancel_event(home.state(), args, None)  # the engine's records name no person
        print(message)
        return code
    store = home.state()
    if not store.run_dir(args.run_id).is_dir():
        queued = store.queued_run(args.run_id)
        if queued is None:
            raise CommandError(f"unknown run {args.run_id!r}; `loopd runs` lists them")
        store.request_cancel(args.run_id)
        _cancel_event(store, args, queued.loop)
        print(f"cancel requested for queued run {args.run_id}")
        return 0

    try:
        run = store.load_run(args.run_id)
    except UnreadableFile as exc:
        # The daemon holds the run in memory: the request still reaches it.
        print(f"loopd: warning: {exc}", file=sys.stderr)
        store.request_cancel(args.run_id)
        _cancel_event(store, args, None)
        print(f"cancel requested for run {args.run_id}")
        return 0
    if run.outcome is not None:
        print(f"run {run.id} already ended: {run.outcome}")
        return 1
    store.request_cancel(run.id)
    _cancel_event(store, args, run.loop)
    outcome = None
    for _ in range(100):
        time.sleep(0.1)
        try:
            outcome = store.load_run(run.id).outcome
        except (OSError, UnreadableFile):
            continue  # being replaced; read it again
        if outcome is not None:
            break
    print(f"{run.id}: {outcome or 'cancel requested'}")
    return 0
