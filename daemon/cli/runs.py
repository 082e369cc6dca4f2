"""`loopd once`, `trigger`, `cancel`, `runs`, `show`: runs, started and read."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Any

from daemon.cli.common import CommandError, command, console, home_of, print_json
from daemon.clock import utc_now
from daemon.config import LoadedConfig, Loop
from daemon.home import Home


def valid_loop(home: Home, loaded: LoadedConfig, name: str) -> Loop:
    """The named loop, or a usage error that says what is wrong with it."""
    if name in loaded.loops:
        return loaded.loops[name]
    path = home.loops_dir / f"{name}.toml"
    problems = [str(e) for e in loaded.errors if e.file == path]
    if problems:
        raise CommandError(f"loop {name!r} is broken:\n  " + "\n  ".join(problems))
    known = ", ".join(sorted(loaded.loops)) or "none"
    raise CommandError(f"unknown loop {name!r} (no {path}); known loops: {known}")


def daemon_pid(home: Home) -> int | None:
    """The pid of the daemon running for this home, or None."""
    from daemon.state.lock import HomeLock

    lock = HomeLock(home.state_dir / "loopd.lock")
    return (lock.holder() or -1) if lock.is_held() else None


def once(args: argparse.Namespace) -> int:
    """One full run now in the foreground; prints RUN_ID on its first line."""
    from daemon.agents.processes import set_child_subreaper
    from daemon.runs.executor import RunExecutor, new_run
    from daemon.runs.services import RunServices, utc_now
    from daemon.scheduling.queue import PendingRun
    from daemon.state.lock import LockHeld
    from daemon.state.records import Trigger

    home = home_of(args)
    loaded = home.load()
    if not loaded.daemon_ok:
        raise CommandError("\n".join(str(e) for e in loaded.errors if e.file == home.config_path))
    loop = valid_loop(home, loaded, args.loop)
    store = home.state(loaded.daemon.limits.events_rotate)
    pid = daemon_pid(home)
    if pid is not None and loop.config.enabled and loop.name not in store.paused_loops():
        raise CommandError(
            f"the daemon (pid {pid}) runs loop {loop.name!r}; use `loopd trigger {loop.name} "
            "--wait` to run it through the daemon, or `loopd pause` it first"
        )
    lock = store.loop_lock(loop.name)
    try:
        lock.acquire()
    except LockHeld as exc:
        raise CommandError(f"loop {loop.name!r} is running now ({exc})") from None
    set_child_subreaper()
    services = RunServices(home=home, config=loaded.daemon, store=store)
    _finish_abandoned(services, loop)
    services.notifications = _notifications(loaded, store)
    for warning in loaded.warnings:
        print(f"loopd: warning: {warning}", file=sys.stderr)
        services.event("config_warning", message=warning)
    now = utc_now()
    trigger = Trigger(loop=loop.name, kind="manual", reason=args.reason or "loopd once", ts=now)
    services.event("trigger", loop=loop.name, kind="manual", reason=trigger.reason, via="once")
    pending = PendingRun(
        id=store.new_run_id(loop.name, now), loop=loop.name, trigger=trigger, queued_at=now
    )
    run = new_run(services, loop, pending)
    print(run.id, flush=True)
    executor = RunExecutor(services, loop, run)
    grace = loaded.daemon.limits.shutdown_grace.total_seconds()
    presses = []

    def on_signal(signum: int, _frame: Any) -> None:
        presses.append(signum)
        executor.interrupt(grace if len(presses) == 1 else 0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        run = executor.execute()
    finally:
        lock.release()
        if services.notifications is not None:
            # Deliveries run in threads; the process must not end under them.
            services.notifications.drain(20)
    _print_outcome(run)
    return 0 if run.outcome == "succeeded" else 1


def _finish_abandoned(services: Any, loop: Loop) -> None:
    """Runs of this loop that a killed `loopd once` left: kill their leftovers, end them."""
    from daemon.runs.finish import complete_finish, finish_interrupted, kill_run_leftovers

    store = services.store
    for run_id in store.live_runs():
        try:
            run = store.load_run(run_id)
        except Exception:  # noqa: BLE001 - unreadable: nothing to finish
            continue
        if run.loop != loop.name:
            continue
        try:
            if run.outcome is not None:
                # Killed while finishing it: complete what finishing had not done.
                complete_finish(services, run, notify_on=loop.config.notify_on)
                continue
            kill_run_leftovers(services, run)
            finish_interrupted(services, loop, run, "the loopd that ran it was stopped or killed")
        except Exception as exc:  # noqa: BLE001 - one broken run must not stop this one
            print(f"loopd: could not end abandoned run {run.id}: {exc}", file=sys.stderr)
            continue
        print(f"loopd: ended abandoned run {run.id} as interrupted", file=sys.stderr)


def _notifications(loaded: LoadedConfig, store: Any) -> Any:
    try:
        from daemon.people.notify import Notifications
    except ImportError:
        return None
    return Notifications(loaded.daemon.notify, store.events)


def _print_outcome(run: Any) -> None:
    from daemon.people.digest import checks_word

    print(f"{run.outcome}: {run.reason}")
    for a in run.attempts:
        score = "-" if a.score is None else a.score
        print(
            f"  attempt {a.n}: checks {checks_word(a.checks_passed)}, score {score}, "
            f"nudges {a.nudges}, exit {a.exit_code}"
        )
    if run.branch and run.isolation != "in-place":
        print(f"  branch {run.branch}")


def trigger(args: argparse.Namespace) -> int:
    """Queue a run for the daemon; --wait: exit as the run ends."""
    from daemon.state.events import EventTail
    from daemon.state.records import Trigger

    home = home_of(args)
    loaded = home.load()
    if loaded.daemon_ok:
        name = valid_loop(home, loaded, args.loop).name
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
    trig = Trigger(loop=name, kind="manual", reason=args.reason or "loopd trigger", ts=now)
    # Followed from before the trigger exists: the daemon's answer cannot be missed.
    tail = EventTail(store.events.path)
    path = store.put_trigger(trig)
    if not args.wait:
        where = f"daemon pid {pid}" if pid else "no daemon is running; `loopd run` will take it"
        print(f"queued {path.name} for {name} ({where})")
        return 0
    return _wait_for(home, store, tail, path.name)


def _wait_for(home: Home, store: Any, tail: Any, inbox_id: str) -> int:
    """Follow the events until the run holding `inbox_id` ends (or the trigger is skipped).

    The daemon names the run in the trigger's event, whether the trigger made a new pending
    run or was merged into one queued earlier (whose id is older than the trigger).
    """
    from daemon.state.store import UnreadableFile

    run_id = None
    ended: dict[str, Any] = {}  # the run's `run_finished` event
    while True:
        for event in tail.read():
            if run_id is None and event.get("inbox") == inbox_id:
                if event.get("type") == "trigger_skipped":
                    print(f"trigger {inbox_id} was skipped: {event.get('why', 'overlap policy')}")
                    return 1
                if event.get("type") in ("trigger", "trigger_merged") and event.get("run"):
                    run_id = event["run"]
                    print(run_id, flush=True)
            elif run_id is not None and event.get("run") == run_id:
                if event.get("type") == "run_finished":
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
                _print_outcome(run)
                return 0 if run.outcome == "succeeded" else 1
        if daemon_pid(home) is None:
            raise CommandError("the daemon stopped before the run ended")
        time.sleep(0.2)


def cancel(args: argparse.Namespace) -> int:
    """Stop a queued or running run; its outcome is `cancelled`."""
    home = home_of(args)
    store = home.state()
    if not store.run_dir(args.run_id).is_dir():
        queued = store.queued_run(args.run_id)
        if queued is None:
            raise CommandError(f"unknown run {args.run_id!r}; `loopd runs` lists them")
        store.request_cancel(args.run_id)
        print(f"cancel requested for queued run {args.run_id}")
        return 0
    from daemon.state.store import UnreadableFile

    try:
        run = store.load_run(args.run_id)
    except UnreadableFile as exc:
        # The daemon holds the run in memory: the request still reaches it.
        print(f"loopd: warning: {exc}", file=sys.stderr)
        store.request_cancel(args.run_id)
        print(f"cancel requested for run {args.run_id}")
        return 0
    if run.outcome is not None:
        print(f"run {run.id} already ended: {run.outcome}")
        return 1
    store.request_cancel(run.id)
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


def runs(args: argparse.Namespace) -> int:
    """List runs, newest first."""
    home = home_of(args)
    store = home.state()
    if args.loop and not (home.loops_dir / f"{args.loop}.toml").exists():
        if not store.run_ids(args.loop):
            raise CommandError(f"unknown loop {args.loop!r}: no loop file and no runs")
    records = []
    for run in store.iter_runs(args.loop):
        records.append(run)
        if len(records) >= args.limit:
            break
    if args.json:
        print_json([_run_summary(r) for r in records])
        return 0
    from rich.table import Table

    table = Table(title=f"runs in {home.root}")
    for col in ("run", "trigger", "outcome", "attempts", "score", "reason"):
        table.add_column(col)
    for r in records:
        last = r.attempts[-1] if r.attempts else None
        table.add_row(
            r.id,
            r.trigger.kind,
            r.outcome or r.phase,
            str(len(r.attempts)),
            "-" if last is None or last.score is None else str(last.score),
            r.reason,
        )
    console().print(table)
    return 0


def _run_summary(run: Any) -> dict[str, Any]:
    return {
        "id": run.id,
        "loop": run.loop,
        "trigger": run.trigger.kind,
        "started": run.started,
        "finished": run.finished,
        "outcome": run.outcome,
        "phase": run.phase,
        "reason": run.reason,
        "attempts": len(run.attempts),
        "branch": run.branch,
        "tokens": run.tokens,
    }


def show(args: argparse.Namespace) -> int:
    """Show one run: trigger, attempts with checks, score, verdict and feedback."""
    home = home_of(args)
    store = home.state()
    from daemon.state.store import UnreadableFile

    if not (store.run_dir(args.run_id) / "run.toml").exists():
        raise CommandError(f"unknown run {args.run_id!r}; `loopd runs` lists them")
    try:
        run = store.load_run(args.run_id)
    except UnreadableFile as exc:
        raise CommandError(f"{exc}; the file is left as it is", code=1) from None
    if args.json:
        print_json(run.model_dump(mode="json"))
        return 0
    from rich.panel import Panel
    from rich.table import Table

    from daemon.people.digest import checks_word

    out = console()
    merged = max(run.trigger.merged_count, len(run.trigger.merged))
    head = [
        f"loop: {run.loop}",
        f"task: {run.task.strip()}",
        f"trigger: {run.trigger.kind} {run.trigger.reason}".rstrip()
        + (f" ({merged} merged)" if merged else ""),
        f"started: {run.started}   finished: {run.finished or '-'}",
        f"outcome: {run.outcome or run.phase}   {run.reason}",
        f"branch: {run.branch}   tokens: {run.tokens}"
        + (f"   cost: ${run.cost_usd:.4f}" if run.cost_usd else ""),
    ]
    if run.rules_fired:
        head.append("rules fired: " + ", ".join(run.rules_fired))
    out.print(Panel("\n".join(head), title=run.id))
    table = Table(show_lines=True)
    for col in ("#", "exit", "nudges", "stalls", "checks", "score", "verdict", "feedback"):
        table.add_column(col)
    for a in run.attempts:
        table.add_row(
            str(a.n),
            "-" if a.exit_code is None else str(a.exit_code),
            str(a.nudges),
            ", ".join(s.kind for s in a.stalls) or "-",
            checks_word(a.checks_passed),
            "-" if a.score is None else str(a.score),
            a.verdict + ("".join(f"\n! {v}" for v in a.violations)),
            a.feedback,
        )
    out.print(table)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "once", once)
    p.add_argument("loop")
    p.add_argument("--reason", help="why, recorded with the run")
    p = command(sub, "trigger", trigger)
    p.add_argument("loop")
    p.add_argument("--reason", help="why, recorded with the run")
    p.add_argument("--wait", action="store_true", help="exit as the run ends (0: succeeded)")
    p = command(sub, "cancel", cancel)
    p.add_argument("run_id")
    p = command(sub, "runs", runs, json_flag=True)
    p.add_argument("loop", nargs="?")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    p = command(sub, "show", show, json_flag=True)
    p.add_argument("run_id")
