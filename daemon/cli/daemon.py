"""`loopd run`, `status`, `pause`, `resume`: the daemon and what it is doing."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from daemon.cli.common import (
    CommandError,
    command,
    console,
    daemon_pid,
    engine_control,
    home_of,
    print_json,
    valid_loop,
)
from daemon.cli.engine_views import show_status
from daemon.clock import utc_now
from daemon.engine import engine_for
from daemon.people.escalation import held_schedules
from daemon.people.terminal import clean
from daemon.people.terminal import markup as m
from daemon.sandbox.limits import describe, run_limits
from daemon.sandbox.registry import choose
from daemon.service.reload import file_digest
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


def _status_data(home: Any, store: Any = None) -> dict[str, Any]:
    """What `status` shows; `store` is kept across frames of --watch (one warning per file)."""
    store = store or StateStore(home.state_dir)
    status = store.load_status()
    loaded = home.load()
    pid = daemon_pid(home)
    warnings = status.daemon.warnings + loaded.warnings
    # The daemon says which sandbox its runs get; without one, what a run would get now.
    sandbox = status.daemon.sandbox if pid is not None else ""
    if not sandbox:
        choice = choose(loaded.daemon.sandbox)
        sandbox = choice.summary()
        warnings = [w for w in (choice.warning, choice.refusal) if w] + warnings
    data: dict[str, Any] = {
        "home": str(home.root),
        "daemon": {
            "running": pid is not None,
            "pid": pid,
            "version": status.daemon.version,
            "started": status.daemon.started,
            "heartbeat": status.daemon.heartbeat,
            "warnings": list(dict.fromkeys(warnings)),
            "sandbox": sandbox,
            "limits": _limits_line(loaded),
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
                last = _newest_finished(store, name, newest[name])
                if last is not None:
                    info["last_run"] = last.id
                    info["last_outcome"] = last.outcome
        info["paused"] = name in paused
        _loaded_note(info, name, loaded, entry if pid else None)
        data["loops"][name] = info
    if pid is not None:
        if status.verifier is not None:
            data["verifier"] = status.verifier.model_dump(mode="json")
        if status.budget is not None:
            data["budget"] = status.budget.model_dump(mode="json")
    _schedules(store, loaded, data["loops"])
    return data


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


def _status_rows(data: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(loop, phase, run, last outcome, next fire) of each loop, as a person reads them."""
    rows = []
    for name, info in data["loops"].items():
        phase = info.get("phase", "idle")
        if info.get("attempt") and phase not in ("idle", "paused"):
            phase += f" (attempt {info['attempt']})"
        if not info.get("enabled", True):
            phase = "disabled" + (f": {info['error'][:60]}" if info.get("error") else "")
        if info.get("paused"):
            phase = "paused"
        if info.get("waiting_for"):
            # Why it waits belongs next to "waiting"; the queue count follows.
            until = str(info.get("resume_at") or "")[:16].replace("T", " ")
            phase += f" (held until {until}: {info['waiting_for']})"
        if info.get("pending") and info.get("enabled", True) and not info.get("paused"):
            phase += f", {info['pending']} queued"
        if info.get("loaded") is False:
            phase = info.get("note") or "not loaded"  # a broken file: not loaded, and why
        elif info.get("note"):
            phase += f" ({info['note']})"
        run = info.get("run") or info.get("last_run") or ""
        if info.get("held_by"):
            fire = "held by an escalation"
        else:
            fire = info.get("next_fire_local") or str(info.get("next_fire") or "")
        rows.append((name, phase, run, info.get("last_outcome", "") or "", fire))
    return rows


def _render_status(data: dict[str, Any], width: int = 80) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    d = data["daemon"]
    if d["running"]:
        head = Text(f"loopd {d['version']} running, pid {d['pid']}, since {d['started']}")
    else:
        head = Text("loopd is not running for this home", style="yellow")
    rows = _status_rows(data)
    columns = ("loop", "phase", "run", "last outcome", "next fire")
    widths = [max([len(col), *(len(r[i]) for r in rows)]) for i, col in enumerate(columns)]
    # Other columns may wrap down to these widths; below them the table would cut words.
    least = [min(w, floor) for w, floor in zip(widths, (12, 8, widths[2], 9, 10), strict=True)]
    sandbox = d.get("sandbox", "")
    unsafe = sandbox.startswith(("sandbox: off:", "sandbox: none"))
    parts: list[Any] = [head, Text(clean(sandbox), style="bold red" if unsafe else "")]
    if d.get("limits"):
        parts.append(Text(clean(d["limits"])))
    if sum(least) + 3 * len(least) + 1 <= width:
        table = Table(title=m(data["home"]))
        for col in columns:
            # The RUN_ID is what a person copies: it is never wrapped or cut; others fold.
            if col == "run":
                table.add_column(col, no_wrap=True, min_width=widths[2])
            else:
                table.add_column(col, overflow="fold")
        for row in rows:
            table.add_row(*(m(cell) for cell in row))
        parts.append(table)
    else:
        # Too narrow for the table with whole RUN_IDs: one block per loop, the id on its line.
        parts.append(Text(clean(data["home"]), style="bold"))
        for name, phase, run, outcome, fire in rows:
            line = f"{name}  {phase}" + (f", last {outcome}" if outcome else "")
            parts.append(Text(clean(line + (f"; next fire {fire}" if fire else ""))))
            if run:
                parts.append(Text(f"  run {run}", no_wrap=True, overflow="ignore"))
    for name, info in data["loops"].items():
        if info.get("held_by"):
            parts.append(
                Text(
                    f"{name}: its schedule is held back by open escalation {info['held_by']}; "
                    f"`loopd escalations resolve {info['held_by']}` releases it",
                    style="yellow",
                )
            )
    verifier = data.get("verifier")
    if verifier is not None:
        since = str(verifier.get("since") or "")[:19].replace("T", " ")
        if verifier.get("reachable", True):
            parts.append(Text("verifier: reachable" + (f" since {since}" if since else "")))
        else:
            error = clean(str(verifier.get("last_error", "")))[:200]
            parts.append(
                Text(
                    f"verifier: UNREACHABLE since {since}: {error} "
                    "(runs waiting in judging hold no run slot)",
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
        parts.append(Text(f"warning: {clean(warning)}", style="yellow"))
    for error in data["errors"]:
        parts.append(Text(f"error: {clean(error)}", style="red"))
    return Group(*parts)


def status(args: argparse.Namespace) -> int:
    """Loops, phases, last outcomes, next fires."""
    home = home_of(args)
    control = engine_control(home)
    if control is not None:
        return show_status(control, args)
    if args.json:
        print_json(_status_data(home))
        return 0
    if not args.watch:
        out = console()
        out.print(_render_status(_status_data(home), out.width))
        return 0
    from rich.live import Live

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
                    out.print(_render_status(_status_data(home, store), out.width))
                    out.file.flush()
                time.sleep(0.5)
        frame = _render_status(_status_data(home, store), out.width)
        with Live(frame, console=out, screen=False) as live:
            changed()
            while True:
                time.sleep(0.5)
                if changed():
                    live.update(_render_status(_status_data(home, store), out.width))
    except KeyboardInterrupt:
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
