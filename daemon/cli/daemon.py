"""`loopd run`, `status`, `pause`, `resume`: the daemon and what it is doing."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon.allocator import limit_arenas
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
from daemon.cli.statusdata import status_data
from daemon.cli.statusview import render_status
from daemon.cli.textout import Terminal
from daemon.clock import utc_now
from daemon.config.land import known_target
from daemon.engine import engine_for
from daemon.people.escalation import held_schedules, open_escalations
from daemon.plain.statusfacts import facts_key, keep_facts
from daemon.sandbox.limits import describe, run_limits
from daemon.sandbox.registry import choose
from daemon.service.statecap import read_usage
from daemon.state.eventtypes import Event
from daemon.state.landingqueue import landing_queues
from daemon.state.lock import LockHeld
from daemon.state.store import StateStore, UnreadableFile


def run(args: argparse.Namespace) -> int:
    """The daemon, in the foreground (systemd runs this)."""
    from daemon.daemon import ConfigFatal, report_failure, run_daemon
    from daemon.web.app import listener_app

    home = home_of(args)
    try:
        if engine_control(home) is not None:  # another engine runs the loops
            limit_arenas()  # as run_daemon does: the engine's process runs for weeks too
            return engine_for(home).serve()
        return run_daemon(home, ui=listener_app)
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


def config_facts(home: Any, loaded: Any) -> dict[str, Any]:
    """What `status` shows of the home's configuration and this host, as plain values: kept
    by the plain path (plain/statusfacts.py) until a file they came from changes."""
    warnings = list(loaded.warnings)
    if loaded.daemon_ok:
        warnings += calibration_warnings(home.state_dir, loaded.daemon, home.config_path)
    choice = choose(loaded.daemon.sandbox)
    return {
        "errors": [
            {"text": str(e), "stem": e.file.stem, "in_loops": e.file.parent.name == "loops"}
            for e in loaded.errors
        ],
        "warnings": warnings,
        "sandbox": {
            "summary": choice.summary(),
            "warning": choice.warning,
            "refusal": choice.refusal,
        },
        "limits": _limits_line(loaded),
        "unchecked": list(loaded.unchecked),
        "loops": {
            name: {
                "enabled": loop.config.enabled,
                "schedule": bool(loop.config.schedule),
                "timezone": loop.config.timezone,
                "task": loop.config.task,
                "path": str(loop.path),
                "repo": str(loop.config.repo_path),
                # Where its runs land: loops sharing it are warned of overlapping files.
                "target": known_target(loop.config),
            }
            for name, loop in loaded.loops.items()
        },
    }


class ModelReader:
    """`state/` for `status` through the models (StateStore), unreadable files reported."""

    def __init__(self, store: StateStore) -> None:
        self.store = store

    def status(self) -> dict[str, Any]:
        status = self.store.load_status()
        return {
            "daemon": dict(status.daemon),
            "loops": {n: e.model_dump(mode="json") for n, e in status.loops.items()},
            "verifier": status.verifier.model_dump(mode="json") if status.verifier else None,
            "budget": status.budget.model_dump(mode="json") if status.budget else None,
        }

    def paused(self) -> set[str]:
        return self.store.paused_loops()

    def newest(self, loops: set[str]) -> dict[str, str]:
        return self.store.last_run_ids()

    def newest_finished(self, loop: str, newest: str) -> tuple[str, str] | None:
        run = _newest_finished(self.store, loop, newest)
        return (run.id, run.outcome) if run is not None else None

    def live(self) -> dict[str, tuple[str, str, int]]:
        return {
            loop: (run.phase, run.id, len(run.attempts))
            for loop, run in _foreground_runs(self.store).items()
        }

    def has_escalation_files(self) -> bool:
        return any(self.store.escalation_path("x").parent.glob("*.md"))

    def open_escalations(self) -> list[dict[str, Any]]:
        return [
            {"run": m.run, "loop": m.loop, "task": m.task, "count": m.count}
            | {"latest_run": m.latest_run}
            for m in open_escalations(self.store)
        ]

    def held(self, tasks: dict[str, str]) -> dict[str, str]:
        return {loop: meta.run for loop, meta in held_schedules(self.store, tasks).items()}

    def usage(self) -> dict[str, Any] | None:
        usage = read_usage(self.store)
        return usage.model_dump(mode="json") if usage is not None else None

    def landing_queues(self) -> list[dict[str, Any]]:
        return [q.model_dump(mode="json") for q in landing_queues(self.store)]


def _status_data(home: Any, store: Any = None, read: Any = None) -> dict[str, Any]:
    """What `status` shows; `store` is kept across frames of --watch (one warning per file);
    `read` is (the identity of the configuration's files, the configuration read after it)
    when the caller has just read it (else read now). Its facts are kept for the plain path
    (cli/plainstatus.py) under that identity, taken before the reading so that a file
    changed meanwhile is read again."""
    key, loaded = read if read is not None else _read_config(home)
    facts = config_facts(home, loaded)
    keep_facts(home.root, facts, key)
    reader = ModelReader(store or StateStore(home.state_dir))
    return status_data(home.root, facts, reader, daemon_pid(home))


def _read_config(home: Any) -> tuple[list[Any], Any]:
    """The identity of the home's configuration files, then the configuration."""
    key = facts_key(home.root)
    return key, home.load()


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
    key, loaded = _read_config(home)  # read once: which engine, and what the loops are
    control = engine_control(home, loaded)
    if control is not None:
        return show_status(control, args)
    if args.json:
        print_json(_status_data(home, read=(key, loaded)))
        return 0
    if not args.watch:
        sys.stdout.write(render_status(_status_data(home, read=(key, loaded)), Terminal.of()))
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
    from rich.text import Text

    out = console()
    terminal = Terminal(out.width, colour=out.is_terminal)
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
                sys.stdout.write(render_status(_status_data(home, store), terminal))
                sys.stdout.flush()
            _nap(0.5, stopping)
        return 0

    def frame() -> Any:
        return Text.from_ansi(render_status(_status_data(home, store), terminal).rstrip("\n"))

    with Live(frame(), console=out, screen=False) as live:
        changed()
        while not stopping:
            _nap(0.5, stopping)
            if changed() and not stopping:
                live.update(frame())
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
        kind = Event.LOOP_PAUSED if paused else Event.LOOP_RESUMED
        # `by`: the console says who did it; the command line's lines stay as they were.
        by = getattr(args, "by", "")
        store.events.append(kind, utc_now(), loop=loop.name, **({"by": by} if by else {}))
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
