"""A run as `loopd runs` and `loopd show` print it: its row, its `--json` summary, its panel
and attempts. From a RunRecord or a plain record (plain/runfile.View, the same attributes), so
the full path (cli/show.py, the engine's views) and the plain path (cli/plainruns.py) print
the same; it imports no pydantic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from daemon.cli.textout import Column, Terminal, listing, panel, table, wrap
from daemon.people.terminal import checks_word, clean
from daemon.plain.landing import landing_fields, landing_line
from daemon.plain.overlap import named
from daemon.state.prunedindex import pruned_line

RunRow = tuple[str, str, str, str, str, str]  # run, trigger, outcome, att, score, reason
REASON_COLUMN = 40  # narrower than this, a reason goes on its own line under its run
RUN_HEADINGS = ("run", "trigger", "outcome", "att", "score")


def runs_table(title: str, rows: list[RunRow], terminal: Terminal) -> str:
    """`loopd runs` (either engine) in the terminal's width: RUN_IDs whole, reasons readable.

    Where the reason column would be narrower than REASON_COLUMN (80 columns), each reason
    goes on its own line under its run, indented, instead of a word per line.
    """
    # The type: ignore below: rows keep their width; the checker cannot see that a generator of a
    # row's cells does.
    rows = [tuple(clean(cell) for cell in row) for row in rows]  # type: ignore[misc]
    fixed = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(RUN_HEADINGS)]
    if terminal.width - (sum(fixed) + 2 * len(fixed)) >= REASON_COLUMN:
        headings = [*RUN_HEADINGS, "reason"]
        return _text(listing(terminal, title, headings, [list(r) for r in rows], {3, 4}))

    def line(cells: tuple[str, ...]) -> str:
        out = [
            c.rjust(w) if i >= 3 else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, fixed, strict=True))
        ]
        return "  ".join(out).rstrip()

    lines = terminal.title(title, terminal.width)
    lines.append(terminal.paint(line(RUN_HEADINGS), "bold"))
    lines.append(terminal.paint("  reason", "bold"))
    lines.append("─" * min(terminal.width, len(line(RUN_HEADINGS))))
    for row in rows:
        lines.append(line(row[:5]))
        if row[5]:
            lines += ["  " + more for more in wrap(row[5], max(terminal.width - 2, 1))]
    return _text(lines)


def _text(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


Lands = Callable[[str], str] | None  # a loop's `land` today (plain/landing.LandsToday)


def landing_line_of(run: Any, lands: Lands = None) -> str:
    """The run's landing state in one line (people/landstate.py's LandingState.line), told by
    the loop's `land` today when `lands` is given."""
    return landing_line(landing_fields(run, lands(run.loop) if lands else ""))


def queued_row(p: Any) -> RunRow:
    """A queued run (state/queuefile.PendingRun) in `loopd runs`."""
    merged = f", {p.merged_count} merged" if p.merged_count else ""
    queued_at = f"queued {p.queued_at:%Y-%m-%d %H:%M}Z{merged}"
    return (p.id, p.trigger.kind, "queued", "0", "-", queued_at)


def run_row(r: Any, lands: Lands = None, aftermath: str = "") -> RunRow:
    """A run with a record in `loopd runs`: parked ones say until when, succeeded ones where
    their work went (and, landed, what became of it: `aftermath`)."""
    last = r.attempts[-1] if r.attempts else None
    reason = r.reason
    resume_at = getattr(r, "resume_at", None)
    if r.phase == "waiting":
        parked_until = f"parked until {resume_at:%Y-%m-%d %H:%M}Z" if resume_at else "parked"
        reason = "; ".join(part for part in (parked_until, reason) if part)
    if r.outcome == "succeeded":
        landed = landing_line_of(r, lands)
        reason = "; ".join(part for part in (reason, landed, aftermath) if part)
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


def run_summary(run: Any, lands: Lands = None) -> dict[str, Any]:
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
        "landing": landing_fields(run, lands(run.loop) if lands else ""),
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


def pruned_panel(p: Any, terminal: Terminal) -> str:
    """`loopd show` of a run retain_days folded away: what its line keeps."""
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
    return _text(panel(terminal, clean(p.run), clean("\n".join(head))))


def head_lines(run: Any, lands: Lands = None, aftermath: str = "") -> list[str]:
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
        f"landing: {landing_line_of(run, lands)}",
    ]
    if aftermath:
        head.append(f"aftermath: {aftermath}")
    for note in run.trigger.overlaps:  # plain/overlap.py, runs/overlapnote.py
        head.append(
            f"queued beside run {note.run} of loop {note.loop} ({note.step}), changing the "
            f"same files: {named(note.files)}"
        )
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


def run_text(
    run: Any,
    evidence: list[Any],
    decisions: str,
    terminal: Terminal,
    lands: Lands = None,
    aftermath: str = "",
) -> str:
    """What `loopd show RUN_ID` prints: the run's panel, its attempts, what the agent
    recorded (evidence lines, decisions.md), where to look next."""
    head = head_lines(run, lands, aftermath)
    lines = panel(terminal, clean(run.id), clean("\n".join(head)))
    headings = ("#", "exit", "nudges", "stalls", "checks", "score", "verdict", "feedback")
    rows = [
        [
            str(a.n),
            "-" if a.exit_code is None else str(a.exit_code),
            str(a.nudges),
            clean(", ".join(s.kind for s in a.stalls) or "-"),
            checks_word(a.checks_passed),
            "-" if a.score is None else str(a.score),
            clean(
                (f"conflict attempt: {a.conflict}\n" if getattr(a, "conflict", "") else "")
                + a.verdict
                + "".join(f"\n! {v}" for v in a.violations)
            ),
            clean(a.feedback),
        ]
        for a in run.attempts
    ]
    columns = [Column(h, least=len(h)) for h in headings]
    lines += table(terminal, "", columns, rows)
    lines += _record_panels(evidence, decisions, terminal)
    if run.attempts:
        # Whole lines: a wrapped RUN_ID cannot be copied.
        lines.append(f"what the agent did: loopd logs {run.id}")
        lines.append(f"its changes: loopd show {run.id} --diff")
    return _text(lines)


def _record_panels(evidence: list[Any], decisions: str, terminal: Terminal) -> list[str]:
    """What the agent recorded through its tools: each claim with what loopd saw, decisions."""
    lines = []
    for item in evidence:
        status = "timed out" if item.timed_out else f"exit {item.exit_code}"
        verdict = "REFUTED" if item.refuted else "holds"
        where = f"{status}, attempt {item.attempt}, {item.commit[:12]}"
        lines.append(f"[{verdict}] {clean(item.claim)}\n    $ {clean(item.command)}   ({where})")
    panels = []
    if lines:
        panels += panel(terminal, "the agent's evidence (evidence.jsonl)", "\n".join(lines))
    decisions = decisions.strip()
    if decisions:
        panels += panel(terminal, "the agent's decisions (decisions.md)", clean(decisions))
    return panels
