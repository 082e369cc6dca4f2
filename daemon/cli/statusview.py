"""`loopd status` as a person reads it: the loops' table (whole RUN_IDs at 80 columns), then
a line per escalation, the home's size, the verifier, the budget, warnings and errors."""

from __future__ import annotations

from typing import Any

from daemon.people.terminal import clean
from daemon.people.terminal import markup as m
from daemon.sizes import human_size


def _state_line(usage: dict[str, Any]) -> str:

    line = f"state: {human_size(usage['total'])} of {human_size(usage['limit'])} (state_max)"
    loops = usage.get("loops") or {}
    if loops:
        line += "; largest loops: " + ", ".join(
            f"{name} {human_size(size)}" for name, size in loops.items()
        )
    return line


def _escalation_line(name: str, info: dict[str, Any]) -> str:
    """What a person reads of a loop's open escalation, held schedule or not."""
    open_ = info.get("escalation") or {}
    held = info.get("held_by")
    run = held or open_.get("run", "")
    count = open_.get("count", 1) if open_.get("run") == run else 1
    times = f" (escalated {count} times)" if count > 1 else ""
    if held:
        return (
            f"{name}: its schedule is held back by open escalation {run}{times}; "
            f"`loopd escalations resolve {run}` releases it"
        )
    return f"{name}: open escalation {run}{times}; `loopd escalations show {run}`"


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
            phase = "not loaded"  # why: on its own line under the table (`errors`)
        elif info.get("note"):
            phase += f" ({info['note']})"
        run = info.get("run") or info.get("last_run") or ""
        if info.get("held_by"):
            fire = "held by an escalation"
        else:
            fire = info.get("next_fire_local") or str(info.get("next_fire") or "")
        rows.append((name, phase, run, info.get("last_outcome", "") or "", fire))
    return rows


def render_status(data: dict[str, Any], width: int = 80) -> Any:
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
        if info.get("held_by") or info.get("escalation"):
            parts.append(Text(_escalation_line(name, info), style="yellow"))
    if data.get("state"):
        parts.append(Text(clean(_state_line(data["state"]))))
    parts += _service_lines(data)
    opened = data.get("open_escalations", 0)
    if opened:
        parts.append(
            Text(f"open escalations: {opened} (`loopd escalations` lists them)", style="yellow")
        )
    for warning in d["warnings"]:
        parts.append(Text(f"warning: {clean(warning)}", style="yellow"))
    for error in data["errors"]:
        parts.append(Text(f"error: {clean(error)}", style="red"))
    return Group(*parts)


def _service_lines(data: dict[str, Any]) -> list[Any]:
    """The verifier's reachability and today's token budget, a line each when known."""
    from rich.text import Text

    parts: list[Any] = []
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
    return parts
