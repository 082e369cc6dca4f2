"""`loopd report`: what happened since a moment, from state; rich on screen, Markdown on disk."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from daemon.people.digest import best_score, one_line
from daemon.people.escalation import Escalation, open_escalations
from daemon.people.landstate import landing_state
from daemon.people.report_aftermath import AftermathReport, aftermath_report
from daemon.people.report_holds import HOLD_EVENTS
from daemon.people.since import events_since, run_ids_since
from daemon.people.verified import Verified
from daemon.plain.landing import LandsToday
from daemon.redact import redact
from daemon.rules.library import RuleLibrary
from daemon.state.atomic import write_atomic
from daemon.state.events import iso
from daemon.state.landingqueue import landing_queues
from daemon.state.records import OUTCOMES, RunRecord
from daemon.state.store import StateStore

RULE_CHANGE_TYPES = {
    "rule_accepted": "learned (trial)",
    "rule_promoted": "promoted",
    "rule_demoted": "retired",
    "rule_retired": "retired",
    "rule_rejected": "rejected",
    "rule_held": "kept in trial",
}


class RunRow(BaseModel):
    id: str
    loop: str
    trigger: str
    outcome: str
    reason: str = ""
    started: datetime
    finished: datetime | None = None
    seconds: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    waited: int = 0  # seconds parked on usage limits
    attempts: int = 0
    scores: list[int | None] = []
    best_score: int | None = None


class LoopSummary(BaseModel):
    loop: str
    runs: int = 0
    outcomes: dict[str, int] = {}
    attempts: int = 0
    seconds: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    waited: int = 0
    best_score: int | None = None
    mean_score: float | None = None


class RuleChange(BaseModel):
    ts: str
    change: str
    rule: str
    kind: str = ""  # failure | decision | knowledge | skill; "" when no longer known
    loop: str | None = None
    run: str | None = None
    text: str = ""


class ReadyRow(BaseModel):
    """A run that succeeded and whose work has not landed: its branch waits for a person."""

    run: str
    loop: str
    branch: str
    repo: str
    land: str = ""
    target: str = ""
    why: str = ""  # why landing did not happen ("" for land = "branch": review it)
    next: str = ""  # the command that lands it (`loopd land RUN`)


class Report(BaseModel):
    """Everything `loopd report` shows."""

    generated: datetime
    since: datetime
    loops: list[LoopSummary] = []
    runs: list[RunRow] = []
    rules: list[RuleChange] = []
    escalations: list[Escalation] = []
    events: dict[str, int] = {}  # event counts in the window, by type
    notify_failed: list[str] = []
    holds: list[str] = []  # usage-limit waits and spent budgets, one line each
    ready: list[ReadyRow] = []  # "Ready to land"
    landing_queue: list[str] = []  # each target's landing queue that holds a run, one line
    verified: Verified | None = None  # None: no attempt was judged by a model
    aftermath: AftermathReport | None = None  # None: no landed run is 7 days old yet
    file: str = ""


def _fill_kinds(changes: list[RuleChange], rules_dir: Path | None) -> None:
    """The kind of each changed rule its event did not carry, from its file when it is there."""
    missing = [c for c in changes if not c.kind and c.rule]
    if not missing or rules_dir is None:
        return

    kinds = {s.rule.id: s.rule.kind for s in RuleLibrary(rules_dir).scan()}
    for change in missing:
        change.kind = kinds.get(change.rule, "")


def _run_row(run: RunRecord, now: datetime) -> RunRow:
    """The report's row of one run."""
    end = run.finished or now
    return RunRow(
        id=run.id,
        loop=run.loop,
        trigger=run.trigger.kind,
        outcome=run.outcome or f"({run.phase})",
        reason=run.reason,
        started=run.started,
        finished=run.finished,
        seconds=max(0, int((end - run.started).total_seconds())),
        tokens=run.tokens,
        cost_usd=run.cost_usd,
        waited=run.waited,
        attempts=len(run.attempts),
        scores=[a.score for a in run.attempts],
        best_score=best_score(run.attempts),
    )


def _ready_row(
    run: RunRecord, branch_exists: Callable[[str, str], bool] | None, land_now: str = ""
) -> ReadyRow | None:
    """The run's row of "Ready to land" when its work waits on a person and its branch is
    there, else None; `land_now`: the loop's `land` today."""
    landing = landing_state(run, land_now)
    if landing.state not in ("blocked", "review"):
        return None
    if branch_exists is not None and not branch_exists(run.repo, run.branch):
        return None
    return ReadyRow(
        run=run.id,
        loop=run.loop,
        branch=run.branch,
        repo=run.repo,
        land=landing.how,
        target=run.target,
        why=run.landing,
        next=landing.run,
    )


def _add_runs(
    report: Report,
    store: StateStore,
    since: datetime,
    now: datetime,
    branch_exists: Callable[[str, str], bool] | None,
    verified: Verified,
) -> None:
    """The rows of the runs in the report's window, those ready to land, and what the clean
    checks and the judge verified among them."""
    lands = LandsToday(store.root.parent)  # the home's: its loops' `land` today
    for run_id in run_ids_since(store, since):
        try:
            run = store.load_run(run_id)
        except Exception:  # noqa: BLE001 - one broken record must not stop the report
            continue
        in_window = run.started >= since or (run.finished or now) >= since
        if not in_window:
            continue
        verified.add(run)
        report.runs.append(_run_row(run, now))
        ready = _ready_row(run, branch_exists, lands(run.loop))
        if ready is not None:
            report.ready.append(ready)


def _loop_summaries(runs: list[RunRow]) -> list[LoopSummary]:
    """Each loop's totals over its rows, by loop name."""
    summaries: dict[str, LoopSummary] = {}
    scores: dict[str, list[int]] = {}
    for row in runs:
        s = summaries.setdefault(row.loop, LoopSummary(loop=row.loop))
        s.runs += 1
        s.outcomes[row.outcome] = s.outcomes.get(row.outcome, 0) + 1
        s.attempts += row.attempts
        s.seconds += row.seconds
        s.tokens += row.tokens
        s.cost_usd = round(s.cost_usd + row.cost_usd, 6)
        s.waited += row.waited
        scores.setdefault(row.loop, []).extend(x for x in row.scores if x is not None)
    for loop, s in summaries.items():
        if scores.get(loop):
            s.best_score = max(scores[loop])
            s.mean_score = round(sum(scores[loop]) / len(scores[loop]), 1)
    return [summaries[k] for k in sorted(summaries)]


def _rule_change(kind: str, event: dict[str, Any]) -> RuleChange:
    """The report's line of a rule event."""
    rule = next(
        (event[k] for k in ("rule", "rule_id", "id") if isinstance(event.get(k), str)),
        "",
    )
    text = next(
        (
            event[k]
            for k in ("intent", "trigger_intent", "reason", "title")
            if isinstance(event.get(k), str) and event[k]
        ),
        "",
    )
    return RuleChange(
        ts=str(event.get("ts", "")),
        change=RULE_CHANGE_TYPES[kind],
        rule=rule,
        kind=str(event.get("kind") or ""),
        loop=event.get("loop"),
        run=event.get("run"),
        text=one_line(text, 140),
    )


def _add_events(report: Report, store: StateStore, since: datetime) -> None:
    """Event counts, rule changes, failed notifications and holds since the window began."""
    for event in events_since(store, since):
        kind = str(event.get("type", ""))
        report.events[kind] = report.events.get(kind, 0) + 1
        if kind in RULE_CHANGE_TYPES:
            report.rules.append(_rule_change(kind, event))
        elif kind == "notify_failed":
            report.notify_failed.append(one_line(str(event.get("error", "")), 160))
        elif kind in HOLD_EVENTS:
            report.holds.append(HOLD_EVENTS[kind](event))


def build_report(
    store: StateStore,
    since: datetime,
    now: datetime,
    rules_dir: Path | None = None,
    branch_exists: Callable[[str, str], bool] | None = None,
    judge: str = "",
) -> Report:
    """Runs, rule changes and waiting escalations since `since`, from state (and `rules_dir`
    for the kind of a rule whose event does not name it); `branch_exists(repo, branch)` leaves
    out of "Ready to land" the branches that are gone; `judge`: the verifier's model."""
    report = Report(generated=now, since=since)
    verified = Verified()
    _add_runs(report, store, since, now, branch_exists, verified)
    report.loops = _loop_summaries(report.runs)
    if verified.verified or verified.caught:
        verified.calibrate(store.root, judge)
        report.verified = verified
    _add_events(report, store, since)
    _fill_kinds(report.rules, rules_dir)
    report.escalations = open_escalations(store)
    report.aftermath = aftermath_report(store, now)
    report.landing_queue = [queue.line() for queue in landing_queues(store)]
    return report


def _cost(value: float) -> str:
    return f"${value:.2f}" if value else "-"


def _hm(seconds: int) -> str:
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
        if seconds >= 3600
        else (f"{seconds // 60}m{seconds % 60:02d}s")
    )


def _score(value: float | int | None) -> str:
    return "-" if value is None else f"{value:g}"


def _outcomes_text(outcomes: dict[str, int]) -> str:
    order = [o for o in OUTCOMES if o in outcomes] + sorted(set(outcomes) - set(OUTCOMES))
    return ", ".join(f"{outcomes[o]} {o}" for o in order)


KINDS = ("failure", "decision", "knowledge", "skill")


def _by_kind(changes: list[RuleChange]) -> list[tuple[str, list[RuleChange]]]:
    """The rule changes grouped by the rule's kind, in the kinds' order; unknown kinds last."""
    groups = []
    for kind in (*KINDS, ""):
        found = [c for c in changes if (c.kind if c.kind in KINDS else "") == kind]
        if found:
            groups.append((kind or "kind not known", found))
    return groups


def render_markdown(report: Report) -> str:
    """The whole report as Markdown (the file under `state/reports/`)."""
    out = [
        f"# loopd report, {iso(report.since)} to {iso(report.generated)}",
        "",
        "## Loops",
        "",
    ]
    out += _loops_markdown(report.loops)
    if report.verified is not None:
        out += ["", report.verified.line()]
    if report.aftermath is not None:
        out += ["", "## After landing", "", *report.aftermath.lines()]
    out += ["", "## Runs", ""]
    out += _runs_markdown(report.runs)
    out += ["", "## Rules learned or retired", ""]
    if not report.rules:
        out.append("None.")
    for kind, changes in _by_kind(report.rules):
        out += [f"### {kind}", ""]
        out += [
            f"- {c.ts[:16]}Z `{c.rule or '?'}` {c.change}"
            + (f" (loop {c.loop})" if c.loop else "")
            + (f": {c.text}" if c.text else "")
            for c in changes
        ]
        out.append("")
    out += ["", "## Escalations waiting", ""]
    out += [
        f"- {e.run} ({e.loop}): {one_line(e.reason or e.cause, 120)}; "
        + (f"escalated {e.count} times, latest run {e.latest_run}; " if e.count > 1 else "")
        + f"`loopd escalations show {e.run}`"
        for e in report.escalations
    ] or ["None."]
    out += ["", "## Ready to land", ""]
    out += [_ready_line(row) for row in report.ready] or ["None."]
    if report.landing_queue:
        out += ["", "## Landing queue", "", *(f"- {line}" for line in report.landing_queue)]
    if report.holds:
        out += ["", "## Usage limits and budgets", ""]
        out += [f"- {line}" for line in report.holds]
    if report.notify_failed:
        out += ["", "## Notifications that failed", ""]
        out += [f"- {line}" for line in report.notify_failed]
    if report.events:
        out += ["", "## Events", ""]
        out += [", ".join(f"{k} {v}" for k, v in sorted(report.events.items()))]
    out.append("")
    return "\n".join(out)


def _loops_markdown(loops: list[LoopSummary]) -> list[str]:
    """The report's table of loops, or a line saying there were no runs."""
    if not loops:
        return ["No runs in this window."]
    out = [
        "| loop | runs | outcomes | attempts | best | mean | time | tokens | cost | parked |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in loops:
        out.append(
            f"| {s.loop} | {s.runs} | {_outcomes_text(s.outcomes)} | {s.attempts} | "
            f"{_score(s.best_score)} | {_score(s.mean_score)} | {_hm(s.seconds)} | {s.tokens} "
            f"| {_cost(s.cost_usd)} | {_hm(s.waited) if s.waited else '-'} |"
        )
    return out


def _runs_markdown(runs: list[RunRow]) -> list[str]:
    """The report's table of runs, or `None.`."""
    if not runs:
        return ["None."]
    out = [
        "| run | trigger | outcome | scores | time | tokens | reason |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        scores = " ".join(_score(x) for x in r.scores) or "-"
        reason = one_line(r.reason, 80).replace("|", "\\|")
        out.append(
            f"| {r.id} | {r.trigger} | {r.outcome} | {scores} | {_hm(r.seconds)} | "
            f"{r.tokens} | {reason} |"
        )
    return out


def _ready_line(row: ReadyRow) -> str:
    where = f" in {row.repo}" if row.repo else ""
    if row.why:
        head = f"not landed on {row.target or 'its target'}: {one_line(row.why, 200)}"
    else:
        head = f"review it, then `{row.next}`" if row.next else "review it"
    return f"- {row.run} ({row.loop}): branch `{row.branch}`{where}; {head}"


def write_report(store: StateStore, report: Report) -> Path:
    """Write the Markdown to `state/reports/report-YYYYMMDDTHHMMSSZ.md`; returns the path."""
    stamp = report.generated.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = store.root / "reports" / f"report-{stamp}.md"
    report.file = str(path)
    write_atomic(path, redact(render_markdown(report)))
    return path


def render_rich(report: Report, console: Any, max_rows: int = 6, max_loops: int = 10) -> None:
    """One screen: loops, runs that need a look, rule changes, escalations waiting."""
    from rich.markup import escape as esc

    console.print(
        f"[bold]loopd report[/] {iso(report.since)[:16]}Z to {iso(report.generated)[:16]}Z"
    )
    if report.loops:
        console.print(_loops_table(report.loops, max_loops))
        if len(report.loops) > max_loops:
            console.print(f"... {len(report.loops) - max_loops} more loops in the file")
    else:
        console.print("No runs in this window.")
    if report.verified is not None:
        console.print(esc(report.verified.line()))
    if report.aftermath is not None:
        console.print("[bold]After landing[/]\n" + esc("\n".join(report.aftermath.lines())))
    bad = [r for r in report.runs if r.outcome != "succeeded"]
    if bad:
        console.print(f"[bold]Runs not succeeded[/] ({len(bad)})")
        for r in bad[-max_rows:]:
            console.print(f"  {r.id} [red]{esc(r.outcome)}[/] {esc(one_line(r.reason, 60))}")
        if len(bad) > max_rows:
            console.print(f"  ... {len(bad) - max_rows} more in the file")
    if report.rules:
        console.print("[bold]Rules[/]")
        for kind, changes in _by_kind(report.rules):
            counts: dict[str, int] = {}
            for c in changes:
                counts[c.change] = counts.get(c.change, 0) + 1
            console.print(f"  {kind}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
            for c in changes[-max_rows:]:
                console.print(f"    {esc(c.rule or '?')} {c.change}")
    console.print(f"[bold]Escalations waiting[/] {len(report.escalations)}")
    for e in report.escalations[:max_rows]:
        times = f" ({e.count} times)" if e.count > 1 else ""
        console.print(f"  {e.run} {esc(one_line(e.reason or e.cause, 60))}{times}")
    if len(report.escalations) > max_rows:
        console.print(f"  ... {len(report.escalations) - max_rows} more: loopd escalations list")
    if report.ready:
        console.print(f"[bold]Ready to land[/] {len(report.ready)}")
        for row in report.ready[:max_rows]:
            why = f": {esc(one_line(row.why, 60))}" if row.why else ""
            console.print(f"  {row.run} {esc(row.branch)}{why}", soft_wrap=True)
        if any(row.next for row in report.ready):
            console.print("  land one with `loopd land RUN_ID`, or merge its branch yourself")
    for line in report.landing_queue[:max_rows]:
        console.print(f"[bold]Landing queue[/] {esc(line)}", soft_wrap=True)
    for line in report.holds[-max_rows:]:
        console.print(f"[yellow]{esc(line)}[/]")
    if report.notify_failed:
        console.print(f"[yellow]{len(report.notify_failed)} notifications failed[/]")
    if report.file:
        console.print(f"Full report: {report.file}")


def _loops_table(loops: list[LoopSummary], max_loops: int) -> Any:
    """The first `max_loops` loops as a rich table."""
    from rich.markup import escape as esc
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("loop", "runs", "outcomes", "best", "mean", "time", "tokens", "cost"):
        table.add_column(col, justify="right" if col in ("runs", "tokens") else "left")
    for s in loops[:max_loops]:
        table.add_row(
            esc(s.loop),
            str(s.runs),
            _outcomes_text(s.outcomes),
            _score(s.best_score),
            _score(s.mean_score),
            _hm(s.seconds),
            str(s.tokens),
            _cost(s.cost_usd),
        )
    return table
