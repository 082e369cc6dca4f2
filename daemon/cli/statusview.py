"""`loopd status` as a person reads it: the loops' table (whole RUN_IDs at 80 columns), then
a line per escalation, the home's size, the verifier, the budget, warnings and errors.
Drawn by cli/textout.py, not rich: `status` must answer at once."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from daemon.cli.textout import Column, Terminal, table
from daemon.people.terminal import clean
from daemon.plain.overlap import overlap_line
from daemon.sizes import human_size


def _state_line(usage: dict[str, Any], now: datetime | None = None) -> str:
    """The home's size as last measured, and how long ago (it is measured hourly, and as
    soon as `state/` grows past `state_max`)."""
    line = f"state: {human_size(usage['total'])} of {human_size(usage['limit'])} (state_max"
    age = _age(usage.get("measured"), now or datetime.now(UTC))
    line += f", measured {age} ago)" if age else ")"
    loops = usage.get("loops") or {}
    if loops:
        line += "; largest loops: " + ", ".join(
            f"{name} {human_size(size)}" for name, size in loops.items()
        )
    return line


def _age(measured: Any, now: datetime) -> str:
    """How long ago `measured` (ISO 8601) was: "moments", "12 min", "3 h"; "" when unreadable.
    Whole minutes: two readings a second apart say the same."""
    try:
        when = datetime.fromisoformat(str(measured))
    except ValueError:
        return ""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    minutes = max(0, int((now - when).total_seconds() // 60))
    if minutes < 1:
        return "moments"
    if minutes < 120:
        return f"{minutes} min"
    return f"{minutes // 60} h"


def landing_line(queue: dict[str, Any]) -> str:
    """A target's landing queue in one line: the run landing now, then those queued."""
    head = f"landing queue {queue['target']} of {queue['repo']}: "
    now = f"landing {queue['landing']} ({queue['step']})" if queue["landing"] else "none landing"
    queued = queue["queued"]
    return head + now + (f"; queued {', '.join(queued)}" if queued else "; none queued")


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


def land_held_line(name: str, hold: dict[str, Any]) -> str:
    """A loop sent back to `land = "branch"` by reverted landings, and how to restore it."""
    runs = ", ".join(hold.get("runs", []))
    return (
        f'{name}: lands as "branch", not "{hold.get("was", "")}": people reverted its runs '
        f"{runs} within 7 days; `loopd escalations resolve {hold.get('escalation', '')}` "
        "restores it"
    )


def judge_field_lines(field: dict[str, Any]) -> tuple[str, str]:
    """The judge's field false-pass rate beside its calibrated one (calibration/field.py), and
    a warning when above `max_false_pass` ("" when not)."""
    rate, (low, high) = field.get("false_pass_rate", 0.0), field.get("false_pass_ci", [0, 1])
    text = (
        f"judge in the field: {field.get('false_passes', 0)} of {field.get('landed', 0)} landed "
        f"runs it passed were reverted ({rate:.0%}, 95% CI {low:.0%}-{high:.0%})"
    )
    calibrated = field.get("calibrated_rate")
    if calibrated is not None:
        c_low, c_high = field.get("calibrated_ci") or [0.0, 1.0]
        text += f"; calibrated: {calibrated:.0%} (95% CI {c_low:.0%}-{c_high:.0%})"
    limit = field.get("max_false_pass")
    warn = ""
    if limit is not None and rate > limit:
        warn = (
            f"the judge's field false-pass rate {rate:.0%} is above [verifier] "
            f"max_false_pass = {limit} (`loopd calibrate --field`)"
        )
    return text, warn


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
            held = f"held until {until}" if until else "held"  # a refused login has no end
            phase += f" ({held}: {info['waiting_for']})"
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


def render_status(data: dict[str, Any], terminal: Terminal) -> str:
    """`status` for a person: the daemon, the sandbox and limits, the loops' table (a block
    per loop where whole RUN_IDs do not fit), escalations, the home's size, the verifier,
    the budget, warnings and errors; wrapped to the terminal's width."""
    d = data["daemon"]
    out = terminal.lines
    if d["running"]:
        lines = out(f"loopd {d['version']} running, pid {d['pid']}, since {d['started']}")
    else:
        lines = out("loopd is not running for this home", "yellow")
    sandbox = d.get("sandbox", "")
    unsafe = sandbox.startswith(("sandbox: off:", "sandbox: none"))
    lines += out(clean(sandbox), "bold red" if unsafe else "")
    if d.get("limits"):
        lines += out(clean(d["limits"]))
    lines += _loops_part(data, terminal)
    for name, info in data["loops"].items():
        if info.get("held_by") or info.get("escalation"):
            lines += out(_escalation_line(name, info), "yellow")
    for name, info in data["loops"].items():
        if info.get("land_held"):
            lines += out(clean(land_held_line(name, info["land_held"])), "yellow")
    if data.get("judge_field"):
        text, warn = judge_field_lines(data["judge_field"])
        lines += out(clean(text))
        if warn:
            lines += out(f"warning: {clean(warn)}", "yellow")
    for queue in data.get("landing", []):
        lines += out(clean(landing_line(queue)))
    for overlap in data.get("overlaps", []):
        lines += out(f"warning: {clean(overlap_line(overlap))}", "yellow")
    if data.get("state"):
        lines += out(clean(_state_line(data["state"])))
    for text, style in _service_lines(data):
        lines += out(text, style)
    opened = data.get("open_escalations", 0)
    if opened:
        lines += out(f"open escalations: {opened} (`loopd escalations` lists them)", "yellow")
    for warning in d["warnings"]:
        lines += out(f"warning: {clean(warning)}", "yellow")
    for error in data["errors"]:
        lines += out(f"error: {clean(error)}", "red")
    return "\n".join(lines) + "\n"


def _loops_part(data: dict[str, Any], terminal: Terminal) -> list[str]:
    """The loops' table, or where whole RUN_IDs do not fit it, a block per loop."""
    rows = [[clean(cell) for cell in row] for row in _status_rows(data)]
    headings = ("loop", "phase", "run", "last outcome", "next fire")
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headings)]
    # Other columns may wrap down to these widths; below them the table would cut words.
    least = [min(w, floor) for w, floor in zip(widths, (12, 8, widths[2], 9, 10), strict=True)]
    if sum(least) + 3 * len(least) + 1 <= terminal.width:
        # The RUN_ID is what a person copies: it is never wrapped or cut; others fold.
        columns = [
            Column(h, least=n, wrap=h != "run") for h, n in zip(headings, least, strict=True)
        ]
        return table(terminal, clean(data["home"]), columns, rows)
    lines = terminal.lines(clean(data["home"]), "bold")
    for name, phase, run, outcome, fire in rows:
        line = f"{name}  {phase}" + (f", last {outcome}" if outcome else "")
        lines += terminal.lines(line + (f"; next fire {fire}" if fire else ""))
        if run:
            lines.append(f"  run {run}")
    return lines


def _service_lines(data: dict[str, Any]) -> list[tuple[str, str]]:
    """The verifier's reachability and today's token budget, a line each when known, with
    the style each is shown in."""
    parts: list[tuple[str, str]] = []
    verifier = data.get("verifier")
    if verifier is not None:
        since = str(verifier.get("since") or "")[:19].replace("T", " ")
        if verifier.get("reachable", True):
            parts.append(("verifier: reachable" + (f" since {since}" if since else ""), ""))
        else:
            error = clean(str(verifier.get("last_error", "")))[:200]
            parts.append(
                (
                    f"verifier: UNREACHABLE since {since}: {error} "
                    "(runs waiting in judging hold no run slot)",
                    "red",
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
        parts.append((line, "yellow" if budget.get("exhausted") else ""))
    return parts
