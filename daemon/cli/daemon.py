"""`loopd run`, `status`, `pause`, `resume`: the daemon and what it is doing."""

from __future__ import annotations

import argparse
import time
from typing import Any

from daemon.cli.common import CommandError, command, console, home_of, print_json
from daemon.cli.runs import daemon_pid, valid_loop
from daemon.clock import utc_now


def run(args: argparse.Namespace) -> int:
    """The daemon, in the foreground (systemd runs this)."""
    import sys

    from daemon.daemon import ConfigFatal, report_failure, run_daemon
    from daemon.state.lock import LockHeld

    home = home_of(args)
    try:
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


def _status_data(home: Any, store: Any = None) -> dict[str, Any]:
    """What `status` shows; `store` is kept across frames of --watch (one warning per file)."""
    from daemon.state.store import StateStore, UnreadableFile

    store = store or StateStore(home.state_dir)
    status = store.load_status()
    loaded = home.load()
    pid = daemon_pid(home)
    data: dict[str, Any] = {
        "home": str(home.root),
        "daemon": {
            "running": pid is not None,
            "pid": pid,
            "version": status.daemon.version,
            "started": status.daemon.started,
            "heartbeat": status.daemon.heartbeat,
            "warnings": list(dict.fromkeys(status.daemon.warnings + loaded.warnings)),
        },
        "loops": {},
        "errors": [str(e) for e in loaded.errors],
    }
    paused = store.paused_loops()
    newest = store.last_run_ids()
    live: dict[str, Any] = {}
    if pid is None:
        # No daemon: a run under way is a `loopd once` (or one a dead daemon left).
        for run_id in store.live_runs():
            try:
                run = store.load_run(run_id)
            except FileNotFoundError:
                continue  # being written: shown next time
            except UnreadableFile as exc:
                store.report_unreadable(exc)
                continue
            live[run.loop] = run
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
                last = _newest_readable(store, name, newest[name])
                if last is not None:
                    info["last_run"] = last.id
                    info["last_outcome"] = last.outcome or last.phase
        info["paused"] = name in paused
        _loaded_note(info, name, loaded, entry if pid else None)
        data["loops"][name] = info
    if pid is not None:
        if status.verifier is not None:
            data["verifier"] = status.verifier.model_dump(mode="json")
        if status.budget is not None:
            data["budget"] = status.budget.model_dump(mode="json")
    return data


def _loaded_note(info: dict[str, Any], name: str, loaded: Any, entry: Any) -> None:
    """Say when the running daemon has not loaded a loop file as it is on disk, and why."""
    from daemon.service.reload import file_digest

    if entry is None:
        return  # no daemon: the files are what runs next
    if not entry.loaded:
        info["note"] = "not loaded: its file does not load (fix it; the daemon reloads it)"
    elif entry.stale:
        info["note"] = "stale: its file does not load; the daemon runs its last good version"
    elif name in loaded.loops and entry.digest != file_digest(loaded.loops[name].path):
        info["note"] = "changed on disk; the daemon reloads it within seconds (`loopd reload`)"


def _newest_readable(store: Any, loop: str, newest: str) -> Any:
    """The loop's newest run record; past an unreadable one (named on stderr), the next."""
    from daemon.state.store import UnreadableFile

    try:
        return store.load_run(newest)
    except FileNotFoundError:
        return None  # being written: shown next time
    except UnreadableFile as exc:
        store.report_unreadable(exc)
    return next(store.iter_runs(loop), None)


def _render_status(data: dict[str, Any]) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    d = data["daemon"]
    if d["running"]:
        head = Text(f"loopd {d['version']} running, pid {d['pid']}, since {d['started']}")
    else:
        head = Text("loopd is not running for this home", style="yellow")
    table = Table(title=data["home"])
    for col in ("loop", "phase", "run", "attempt", "last outcome", "next fire", "pending"):
        table.add_column(col)
    for name, info in data["loops"].items():
        phase = info.get("phase", "idle")
        if not info.get("enabled", True):
            phase = "disabled" + (f": {info['error'][:60]}" if info.get("error") else "")
        if info.get("paused"):
            phase = "paused"
        if info.get("waiting_for"):
            until = str(info.get("resume_at") or "")[:16].replace("T", " ")
            phase += f" (held until {until}: {info['waiting_for']})"
        if info.get("note"):
            phase += f" ({info['note']})"
        table.add_row(
            name,
            phase,
            info.get("run", "") or "",
            str(info.get("attempt") or ""),
            f"{info.get('last_outcome', '')} {info.get('last_run', '')}".strip(),
            str(info.get("next_fire") or ""),
            str(info.get("pending") or ""),
        )
    parts: list[Any] = [head, table]
    verifier = data.get("verifier")
    if verifier is not None:
        since = str(verifier.get("since") or "")[:19].replace("T", " ")
        if verifier.get("reachable", True):
            parts.append(Text("verifier: reachable" + (f" since {since}" if since else "")))
        else:
            parts.append(
                Text(
                    f"verifier: UNREACHABLE since {since}: {verifier.get('last_error', '')}"[:300]
                    + " (runs waiting in judging hold no run slot)",
                    style="red",
                )
            )
    budget = data.get("budget")
    if budget is not None:
        line = (
            f"budget today ({budget.get('day')}): "
            f"{budget.get('tokens')} of {budget.get('limit')} tokens"
        )
        if budget.get("exhausted"):
            line += f"; spent: new runs wait until {str(budget.get('until'))[:16]}"
        parts.append(Text(line, style="yellow" if budget.get("exhausted") else ""))
    for warning in d["warnings"]:
        parts.append(Text(f"warning: {warning}", style="yellow"))
    for error in data["errors"]:
        parts.append(Text(f"error: {error}", style="red"))
    return Group(*parts)


def status(args: argparse.Namespace) -> int:
    """Loops, phases, last outcomes, next fires."""
    home = home_of(args)
    if args.json:
        print_json(_status_data(home))
        return 0
    if not args.watch:
        console().print(_render_status(_status_data(home)))
        return 0
    from rich.live import Live

    from daemon.state.store import StateStore

    out = console()
    store = StateStore(home.state_dir)
    status_file = home.state_dir / "status.toml"
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

    try:
        if not out.is_terminal:
            # Piped into a file or another program: one frame per change, appended.
            while True:
                if changed():
                    out.print(_render_status(_status_data(home, store)))
                    out.file.flush()
                time.sleep(0.5)
        with Live(_render_status(_status_data(home, store)), console=out, screen=False) as live:
            changed()
            while True:
                time.sleep(0.5)
                if changed():
                    live.update(_render_status(_status_data(home, store)))
    except KeyboardInterrupt:
        return 0


def _set_paused(args: argparse.Namespace, paused: bool) -> int:
    home = home_of(args)
    loaded = home.load()
    loop = valid_loop(home, loaded, args.loop)
    store = home.state(loaded.daemon.limits.events_rotate)
    was = loop.name in store.paused_loops()
    store.set_paused(loop.name, paused)
    if was != paused:
        store.events.append("loop_paused" if paused else "loop_resumed", utc_now(), loop=loop.name)
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


def register(sub: argparse._SubParsersAction) -> None:
    command(sub, "run", run)
    p = command(sub, "status", status, json_flag=True)
    p.add_argument("--watch", action="store_true", help="a live view that redraws as state changes")
    p = command(sub, "pause", pause)
    p.add_argument("loop")
    p = command(sub, "resume", resume)
    p.add_argument("loop")
