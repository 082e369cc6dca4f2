"""`loopd run`, `status`, `pause`, `resume`: the daemon and what it is doing."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from daemon.calibration.warnings import calibration_warnings
from daemon.cli.common import (
    CommandError,
    console,
    daemon_pid,
    engine_control,
    home_of,
    valid_loop,
)
from daemon.cli.engine_views import show_status
from daemon.cli.jsonout import print_json
from daemon.cli.statusview import render_status
from daemon.clock import utc_now
from daemon.engine import engine_for
from daemon.people.escalation import held_schedules, open_escalations
from daemon.sandbox.limits import describe, run_limits
from daemon.sandbox.registry import choose
from daemon.service.reload import file_digest
from daemon.service.statecap import read_usage
from daemon.state.eventtypes import Event
from daemon.state.lock import LockHeld
from daemon.state.store import StateStore, UnreadableFile


def run(args: argparse.Namespace) -> int:
    """The daemon, in the foreground (systemd runs this)."""
    from daemon.daemon import ConfigFatal, report_failure, run_daemon

    home = home_of(args)
    try:
        if engine_control(home) is not None:  # another engine runs the loops
            return engine_for(home).serve()
        return run_daemon(home)
    except ConfigFatal as exc:
        print(f"loopd: configuration error, not starting:\n{exc}", file=sys.stderr)
        return 2
    except LockHeld as exc:
        message = f"{exc}; stop it first (kill {exc.pid})" if exc.pid else str(exc)
        raise CommandError(message) from None
    except Exception as exc:
        # loopd died: the person hears of it through [notify], then systemd restarts it.
        report_failure(home, exc)
        raise


def _limits_line(loaded: Any) -> str:
    """What bounds each run's processes here (`[limits]`, and how this host enforces them)."""
    return describe(run_limits(loaded.daemon.limits)) if loaded.daemon_ok else ""


def _status_data(home: Any, store: Any = None, loaded: Any = None) -> dict[str, Any]:
    """What `status` shows; `store` is kept across frames of --watch (one warning per file);
    `loaded` is the home's configuration when the caller has just read it (else read now)."""

    store = store or StateStore(home.state_dir)
    status = store.load_status()
    loaded = home.load() if loaded is None else loaded
    pid = daemon_pid(home)
    data: dict[str, Any] = {
        "home": str(home.root),
        "daemon": _daemon_info(home, status, loaded, pid),
        "loops": {},
        "errors": [str(e) for e in loaded.errors],
    }
    paused = store.paused_loops()
    newest = store.last_run_ids()
    # No daemon: a run under way is a `loopd once` (or one a dead daemon left).
    live = _foreground_runs(store) if pid is None else {}
    names = set(loaded.loops) | (set(status.loops) if pid else set())
    for name in sorted(names):
        entry = status.loops.get(name)
        info = entry.model_dump(mode="json") if entry and pid else {}
        if pid and entry is None:
            info["note"] = (
                "not loaded by the daemon yet; it reloads within seconds (`loopd reload`)"
            )
        if name in loaded.loops:
            info.setdefault("enabled", loaded.loops[name].config.enabled)
            info.setdefault("phase", "paused" if name in paused else "idle")
            if name in live:
                info.update(
                    phase=live[name].phase, run=live[name].id, attempt=len(live[name].attempts)
                )
            if not info.get("last_run") and name in newest:
                last = _newest_finished(store, name, newest[name])
                if last is not None:
                    info["last_run"] = last.id
                    info["last_outcome"] = last.outcome
        info["paused"] = name in paused
        _loaded_note(info, name, loaded, entry if pid else None)
        if info.get("loaded") is False:
            info["phase"] = "not-loaded"
        data["loops"][name] = info
    _unloaded_files(loaded, data["loops"])
    data["open_escalations"] = _open_escalations(store)
    if pid is not None:
        if status.verifier is not None:
            data["verifier"] = status.verifier.model_dump(mode="json")
        if status.budget is not None:
            data["budget"] = status.budget.model_dump(mode="json")
    _schedules(store, loaded, data["loops"])
    _escalations(store, data["loops"])
    data["state"] = _state_usage(store)
    return data


def _daemon_info(home: Any, status: Any, loaded: Any, pid: int | None) -> dict[str, Any]:
    """The daemon part of `status`: running or not, its version and times, warnings (the
    calibration's too), the sandbox runs get, the limits."""
    warnings = status.daemon.warnings + loaded.warnings
    if loaded.daemon_ok:
        warnings += calibration_warnings(home.state_dir, loaded.daemon, home.config_path)
    # The daemon says which sandbox its runs get; without one, what a run would get now.
    sandbox = status.daemon.sandbox if pid is not None else ""
    if not sandbox:
        choice = choose(loaded.daemon.sandbox)
        sandbox = choice.summary()
        warnings = [w for w in (choice.warning, choice.refusal) if w] + warnings
    return {
        "running": pid is not None,
        "pid": pid,
        "version": status.daemon.version,
        "started": status.daemon.started,
        "heartbeat": status.daemon.heartbeat,
        "warnings": list(dict.fromkeys(warnings)),
        "sandbox": sandbox,
        "limits": _limits_line(loaded),
    }


def _open_escalations(store: Any) -> int:
    """How many escalations wait for a person (none read when the folder is empty)."""
    if not any(store.escalation_path("x").parent.glob("*.md")):
        return 0

    return len(open_escalations(store))


def _foreground_runs(store: Any) -> dict[str, Any]:
    """Each loop's live run by its record, when no daemon runs (unreadable ones named)."""

    live: dict[str, Any] = {}
    for run_id in store.live_runs():
        try:
            run = store.load_run(run_id)
        except FileNotFoundError:
            continue  # being written: shown next time
        except UnreadableFile as exc:
            store.report_unreadable(exc)
            continue
        live[run.loop] = run
    return live


def _unloaded_files(loaded: Any, loops: dict[str, dict[str, Any]]) -> None:
    """Loop files that do not load: a row of their own (phase `not-loaded`), with why."""
    for error in loaded.errors:
        name = error.file.stem
        if error.file.parent.name != "loops" or name in loops:
            continue
        why = " ".join(str(error).split())
        loops[name] = {
            "enabled": False,
            "phase": "not-loaded",
            "loaded": False,
            "error": str(error),
            "note": f"not loaded: {why}",
            "paused": False,
        }
    for name in sorted(loops):  # keep the rows in name order with the new ones in place
        loops[name] = loops.pop(name)


def _schedules(store: Any, loaded: Any, loops: dict[str, dict[str, Any]]) -> None:
    """Each scheduled loop's next fire in its own zone, or the escalation holding it back."""
    scheduled = {
        name: loop
        for name, loop in loaded.loops.items()
        if name in loops and loop.config.enabled and loop.config.schedule
    }
    held: dict[str, Any] = {}
    if scheduled and any(store.escalation_path("x").parent.glob("*.md")):
        # Only with escalations on disk: without them no schedule is held.
        held = held_schedules(store, {n: loop.config.task for n, loop in scheduled.items()})
    for name, loop in scheduled.items():
        info = loops[name]
        info["timezone"] = loop.config.timezone
        fire = info.get("next_fire")
        if fire:
            when = datetime.fromisoformat(fire) if isinstance(fire, str) else fire
            local = when.astimezone(ZoneInfo(loop.config.timezone))
            info["next_fire_local"] = f"{local:%a %d %b %H:%M} {local.tzname()}"
        if name in held:
            info["held_by"] = held[name].run


def _escalations(store: Any, loops: dict[str, dict[str, Any]]) -> None:
    """Each loop's open escalation: its run and how many runs escalated into it."""
    if not any(store.escalation_path("x").parent.glob("*.md")):
        return  # status stays fast without escalations on disk

    for meta in open_escalations(store):  # oldest first: the newest wins
        if meta.loop in loops:
            loops[meta.loop]["escalation"] = {
                "run": meta.run,
                "count": meta.count,
                "latest_run": meta.latest_run,
            }


def _state_usage(store: Any) -> dict[str, Any] | None:
    """The size of `state/` and its largest loops, as the housekeeper last measured them."""

    usage = read_usage(store)
    return usage.model_dump(mode="json") if usage is not None else None


def _loaded_note(info: dict[str, Any], name: str, loaded: Any, entry: Any) -> None:
    """Say when the running daemon has not loaded a loop file as it is on disk, and why."""
    if entry is None:
        return  # no daemon: the files are what runs next
    if not entry.loaded:
        why = " ".join(entry.error.split()) or "its file does not load"
        info["note"] = f"not loaded: {why} (fix the file; the daemon reloads it)"
    elif entry.stale:
        info["note"] = "stale: its file does not load; the daemon runs its last good version"
    elif name in loaded.loops and entry.digest != file_digest(loaded.loops[name].path):
        info["note"] = "changed on disk; the daemon reloads it within seconds (`loopd reload`)"


def _newest_finished(store: Any, loop: str, newest: str) -> Any:
    """The loop's newest finished run (a live or parked one has no outcome yet); past an
    unreadable record (named on stderr), the next."""
    try:
        run = store.load_run(newest)
    except FileNotFoundError:
        return None  # being written: shown next time
    except UnreadableFile as exc:
        store.report_unreadable(exc)
    else:
        if run.outcome is not None:
            return run
    return next((r for r in store.iter_runs(loop) if r.outcome is not None), None)


def status(args: argparse.Namespace) -> int:
    """Loops, phases, last outcomes, next fires."""
    home = home_of(args)
    loaded = home.load()  # read once: which engine, and what the loops are
    control = engine_control(home, loaded)
    if control is not None:
        return show_status(control, args)
    if args.json:
        print_json(_status_data(home, loaded=loaded))
        return 0
    if not args.watch:
        out = console()
        out.print(render_status(_status_data(home, loaded=loaded), out.width))
        return 0
    return _watch_status(home)


def _status_changes(status_file: Path) -> Callable[[], bool]:
    """A test of whether status.toml changed since the last time it was asked."""
    seen: tuple[float, int] | None = None

    def changed() -> bool:
        nonlocal seen
        try:
            st = status_file.stat()
            mark = (st.st_mtime, st.st_size)
        except FileNotFoundError:
            mark = (0.0, 0)
        if mark == seen:
            return False
        seen = mark
        return True

    return changed


def _nap(seconds: float, stopping: list[bool]) -> None:
    """Sleep up to `seconds`, waking early once a stop was asked for."""
    end = time.monotonic() + seconds
    while not stopping and time.monotonic() < end:
        time.sleep(0.1)


def _watch_status(home: Any) -> int:
    """`status --watch`: a frame each time status.toml changes, until Ctrl-C or SIGTERM."""
    from rich.live import Live

    out = console()
    store = StateStore(home.state_dir)
    changed = _status_changes(home.state_dir / "status.toml")
    # The signals only set a flag, so a frame is never cut off in the middle of its reads
    # (an interrupt that lands there can be lost, and the watch would go on).
    stopping: list[bool] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.append(True))
    if not out.is_terminal:
        # Piped into a file or another program: one frame per change, appended.
        while not stopping:
            if changed():
                out.print(render_status(_status_data(home, store), out.width))
                out.file.flush()
            _nap(0.5, stopping)
        return 0
    frame = render_status(_status_data(home, store), out.width)
    with Live(frame, console=out, screen=False) as live:
        changed()
        while not stopping:
            _nap(0.5, stopping)
            if changed() and not stopping:
                live.update(render_status(_status_data(home, store), out.width))
    return 0


def _set_paused(args: argparse.Namespace, paused: bool) -> int:
    home = home_of(args)
    loaded = home.load()
    loop = valid_loop(home, loaded, args.loop)
    control = engine_control(home, loaded)
    if control is not None:  # the loop's controller holds its runs (and records the event)
        control.pause(loop.name, paused)
        state = "paused" if paused else "resumed"
        note = " (triggers are recorded and run after `loopd resume`)" if paused else ""
        print(f"{loop.name} {state}{note}")
        return 0
    store = home.state(loaded.daemon.limits.events_rotate)
    was = loop.name in store.paused_loops()
    store.set_paused(loop.name, paused)
    if was != paused:
        store.events.append(
            Event.LOOP_PAUSED if paused else Event.LOOP_RESUMED, utc_now(), loop=loop.name
        )
    state = "paused" if paused else "resumed"
    note = " (triggers are recorded and run after `loopd resume`)" if paused else ""
    print(f"{loop.name} {state}{note}")
    return 0


def pause(args: argparse.Namespace) -> int:
    """Stop a loop's triggers from starting runs (they are recorded, not lost)."""
    return _set_paused(args, True)


def resume(args: argparse.Namespace) -> int:
    """Let a paused loop's triggers start runs again."""
    return _set_paused(args, False)
