"""A run as `loopd runs` and `loopd show` print it: its row, its `--json` summary, its panel
and attempts. From a RunRecord or a plain record (plain/runfile.View, the same attributes), so
the full path (cli/show.py, the engine's views) and the plain path (cli/plainruns.py) print
the same; it imports no pydantic.
"""

from __future__ import annotations

from typing import Any

from daemon.people.terminal import checks_word, clean
from daemon.people.terminal import markup as m
from daemon.plain.landing import landing_fields, landing_line
from daemon.state.prunedindex import pruned_line

RunRow = tuple[str, str, str, str, str, str]  # run, trigger, outcome, att, score, reason
REASON_COLUMN = 40  # narrower than this, a reason goes on its own line under its run
RUN_HEADINGS = ("run", "trigger", "outcome", "att", "score")


def runs_table(title: str, rows: list[RunRow], width: int) -> Any:
    """`loopd runs` (either engine) in `width` columns: RUN_IDs whole, reasons readable.

    Where the reason column would be narrower than REASON_COLUMN (80 columns), each reason
    goes on its own line under its run, indented, instead of a word per line.
    """
    from rich import box
    from rich.console import Group
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    fixed = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(RUN_HEADINGS)]
    if width - (sum(fixed) + 3 * len(fixed)) >= REASON_COLUMN:
        table = Table(title=m(title), box=box.SIMPLE_HEAD, pad_edge=False)
        # The RUN_ID is what a person copies: never wrapped or cut.
        table.add_column("run", no_wrap=True, min_width=fixed[0])
        table.add_column("trigger", no_wrap=True)
        table.add_column("outcome", no_wrap=True)
        table.add_column("att", justify="right")
        table.add_column("score", justify="right")
        table.add_column("reason", min_width=10)
        for row in rows:
            table.add_row(*row[:5], m(row[5]))
        return table

    # Columns laid out by hand: a table cell cannot span the row the reason needs.
    def line(cells: tuple[str, ...]) -> str:
        out = [
            c.rjust(w) if i >= 3 else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, fixed, strict=True))
        ]
        return "  ".join(out).rstrip()

    parts: list[Any] = [Text(title, justify="center", style="italic")]
    parts.append(Text(line(RUN_HEADINGS), style="bold", no_wrap=True, overflow="ignore"))
    parts.append(Text("  reason", style="bold", no_wrap=True))
    parts.append(Text("─" * min(width, len(line(RUN_HEADINGS))), no_wrap=True))
    for row in rows:
        parts.append(Text(line(row[:5]), no_wrap=True, overflow="ignore"))
        if row[5]:
            # Agent text may be in it: shown as written, never read as markup.
            parts.append(Padding(Text(row[5], overflow="fold"), (0, 0, 0, 2)))
    return Group(*parts)


def landing_line_of(run: Any) -> str:
    """The run's landing state in one line (people/landstate.py's LandingState.line)."""
    return landing_line(landing_fields(run))


def queued_row(p: Any) -> RunRow:
    """A queued run (state/queuefile.PendingRun) in `loopd runs`."""
    merged = f", {p.merged_count} merged" if p.merged_count else ""
    queued_at = f"queued {p.queued_at:%Y-%m-%d %H:%M}Z{merged}"
    return (p.id, p.trigger.kind, "queued", "0", "-", queued_at)


def run_row(r: Any) -> RunRow:
    """A run with a record in `loopd runs`: parked ones say until when, succeeded ones where
    their work went."""
    last = r.attempts[-1] if r.attempts else None
    reason = r.reason
    resume_at = getattr(r, "resume_at", None)
    if r.phase == "waiting":
        parked_until = f"parked until {resume_at:%Y-%m-%d %H:%M}Z" if resume_at else "parked"
        reason = "; ".join(part for part in (parked_until, reason) if part)
    if r.outcome == "succeeded":
        reason = "; ".join(part for part in (reason, landing_line_of(r)) if part)
    score = "-" if last is None or last.score is None else str(last.score)
    return (r.id, r.trigger.kind, r.outcome or r.phase, str(len(r.attempts)), score, reason)


def pruned_row(p: Any) -> RunRow:
    """A pruned run (state/pruned.PrunedRun) in `loopd runs`."""
    reason = "; ".join(part for part in (f"pruned {p.pruned:%Y-%m-%d}", p.reason) if part)
    return (p.run, p.trigger, p.outcome or "-", str(p.attempts), "-", reason)


def queued_summary(p: Any) -> dict[str, Any]:
    """A queued run in `loopd runs --json`, with the keys of `run_summary`, phase `queued`."""
    return {
        "run": p.id,
        "id": p.id,  # the same as `run`, kept for scripts written before it
        "loop": p.loop,
        "trigger": p.trigger.kind,
        "started": None,
        "finished": None,
        "outcome": None,
        "phase": "queued",
        "reason": p.trigger.reason,
        "queued_at": p.queued_at,
        "merged": p.merged_count,
        "attempts": 0,
        "branch": "",
        "tokens": 0,
        "landing": {"state": "none", "how": "", "why": "the run has not started", "run": ""},
    }


def run_summary(run: Any) -> dict[str, Any]:
    """A run with a record in `loopd runs --json`."""
    return {
        "run": run.id,
        "id": run.id,  # the same as `run`, kept for scripts written before it
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
        "landing": landing_fields(run),
    }


def pruned_summary(p: Any) -> dict[str, Any]:
    """A pruned run with the keys of `run_summary`, phase `pruned`."""
    landing = (
        {"state": "landed", "how": p.landed, "why": "", "run": ""}
        if p.landed
        else {"state": "none", "how": "", "why": "the run was pruned", "run": ""}
    )
    return {
        "run": p.run,
        "id": p.run,
        "loop": p.loop,
        "trigger": p.trigger,
        "started": p.started,
        "finished": p.finished,
        "outcome": p.outcome,
        "phase": "pruned",
        "reason": p.reason,
        "attempts": p.attempts,
        "branch": "" if p.branch_deleted else p.branch,
        "tokens": p.tokens,
        "landing": landing,
        "pruned": p.pruned,
    }


def pruned_panel(p: Any) -> Any:
    """`loopd show` of a run retain_days folded away: what its line keeps."""
    from rich.panel import Panel

    branch = p.branch or "-"
    if p.branch and p.branch_deleted:
        branch += " (deleted)"
    head = [
        pruned_line(p.pruned, p.retain_days),
        f"loop: {p.loop}",
        f"task: {p.task}",
        f"trigger: {p.trigger} {p.trigger_reason}".rstrip(),
        f"started: {p.started or '-'}   finished: {p.finished or '-'}",
        f"outcome: {p.outcome or '-'}   {p.reason}",
        f"attempts: {p.attempts}   branch: {branch}   tokens: {p.tokens}",
        f"landing: {f'landed ({p.landed})' if p.landed else 'not landed'}",
    ]
    return Panel(m("\n".join(head)), title=m(p.run))


def head_lines(run: Any) -> list[str]:
    """The lines of the run's panel: loop, task, trigger, times, outcome, branch, landing,
    and its retry, park and rules when it has them."""
    merged = max(run.trigger.merged_count, len(run.trigger.merged))
    head = [
        f"loop: {run.loop}",
        f"task: {run.task.strip()}",
        f"trigger: {run.trigger.kind} {run.trigger.reason}".rstrip()
        + (f" ({merged} merged)" if merged else ""),
        f"started: {run.started}   finished: {run.finished or '-'}",
        f"outcome: {run.outcome or run.phase}   {run.reason}",
        f"branch: {run.branch or '-'}   tokens: {run.tokens}"
        + (f"   cost: ${run.cost_usd:.4f}" if run.cost_usd else ""),
        f"landing: {landing_line_of(run)}",
    ]
    if run.retry_not_run:
        head.append(f"its retry could not run: {run.retry_not_run}")
    if run.phase == "waiting" and run.resume_at and run.park:
        head.append(
            f"parked on the usage limit of agent profile {run.park.profile!r} until "
            f"{run.resume_at}: {run.park.message[-200:]}"
        )
    if run.waited:
        head.append(f"parked {run.waited}s in all on usage limits")
    if run.rules_fired:
        head.append("rules fired: " + ", ".join(run.rules_fired))
    return head


def run_parts(run: Any, evidence: list[Any], decisions: str) -> list[tuple[Any, dict[str, Any]]]:
    """What `loopd show RUN_ID` prints, each with its `print` options: the run's panel, its
    attempts, what the agent recorded (evidence lines, decisions.md), where to look next."""
    from rich.panel import Panel
    from rich.table import Table

    parts: list[tuple[Any, dict[str, Any]]] = []
    parts.append((Panel(m("\n".join(head_lines(run))), title=m(run.id)), {}))
    table = Table(show_lines=True)
    for col in ("#", "exit", "nudges", "stalls", "checks", "score", "verdict", "feedback"):
        table.add_column(col)
    for a in run.attempts:
        table.add_row(
            str(a.n),
            "-" if a.exit_code is None else str(a.exit_code),
            str(a.nudges),
            m(", ".join(s.kind for s in a.stalls) or "-"),
            checks_word(a.checks_passed),
            "-" if a.score is None else str(a.score),
            m(a.verdict + ("".join(f"\n! {v}" for v in a.violations))),
            m(a.feedback),
        )
    parts.append((table, {}))
    parts += [(panel, {}) for panel in _record_panels(evidence, decisions)]
    if run.attempts:
        # Whole lines: a wrapped RUN_ID cannot be copied.
        plain = {"markup": False, "highlight": False, "soft_wrap": True}
        parts.append((f"what the agent did: loopd logs {run.id}", plain))
        parts.append((f"its changes: loopd show {run.id} --diff", plain))
    return parts


def _record_panels(evidence: list[Any], decisions: str) -> list[Any]:
    """What the agent recorded through its tools: each claim with what loopd saw, decisions."""
    from rich.panel import Panel

    lines = []
    for item in evidence:
        status = "timed out" if item.timed_out else f"exit {item.exit_code}"
        verdict = "REFUTED" if item.refuted else "holds"
        where = f"{status}, attempt {item.attempt}, {item.commit[:12]}"
        lines.append(f"[{verdict}] {clean(item.claim)}\n    $ {clean(item.command)}   ({where})")
    panels = []
    if lines:
        panels.append(Panel(m("\n".join(lines)), title="the agent's evidence (evidence.jsonl)"))
    decisions = decisions.strip()
    if decisions:
        panels.append(Panel(m(clean(decisions)), title="the agent's decisions (decisions.md)"))
    return panels
