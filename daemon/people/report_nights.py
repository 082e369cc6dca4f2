"""What the HTML report draws, counted from state: per night, per loop, per outcome.

A night is the evening it began: a run started between noon on the 3rd and noon on the
4th (in the report's zone) belongs to the night of the 3rd, so a run at 01:00 counts with
the evening before. No charting library here: this module only counts (report_html.py
draws), so `loopd status` and the Markdown report never import one.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from datetime import date, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from daemon.people.digest import attempt_diffstat, one_line
from daemon.people.escalation import open_escalations
from daemon.people.since import events_since
from daemon.people.verified import Verified
from daemon.redact import redact
from daemon.regularfile import STATE_MAX, read_regular
from daemon.rules.library import RuleLibrary
from daemon.state.events import iso
from daemon.state.store import StateStore, UnreadableFile

RULE_STATUSES = ("trial", "active", "retired", "rejected")
# A rule event's effect on its rule's status (a move's own `to` wins when it has one).
_RULE_EVENT_STATUS = {
    "rule_accepted": "trial",
    "rule_rejected": "rejected",
    "rule_promoted": "active",
    "rule_demoted": "retired",
    "rule_retired": "retired",
}
NOON = timedelta(hours=12)
# The page lists this many runs, newest first, each with its section: a bounded page
# whatever the window holds (`loopd runs` has the rest).
LISTED_MAX = 200


def night_of(ts: datetime, tz: tzinfo | None) -> date:
    """The night a moment belongs to: the date of the evening before it (noon to noon)."""
    local = ts.astimezone(tz) if tz is not None else ts.astimezone()
    return (local - NOON).date()


class OpenEscalation(BaseModel):
    run: str
    loop: str
    cause: str
    reason: str
    escalated: datetime
    file: str  # absolute path of the escalation file
    count: int = 1  # runs of the task that escalated while it was open
    latest_run: str = ""


class ReadyBranch(BaseModel):
    run: str
    loop: str
    branch: str
    repo: str
    finished: datetime | None = None
    added: int = 0
    removed: int = 0
    files: int = 0


class AttemptLine(BaseModel):
    """One attempt of a listed run, as its section shows it."""

    n: int
    exit_code: int | None = None
    checks: str = "-"  # passed, failed, or - (not run)
    score: int | None = None
    verdict: str = ""  # redacted, on one line
    tokens: int = 0


class RunLine(BaseModel):
    """A run in the report's list, its texts redacted and capped."""

    id: str
    loop: str
    night: str
    outcome: str
    cause: str = ""
    reason: str = ""
    task: str = ""
    trigger: str = ""
    started: datetime
    finished: datetime | None = None
    when: str = ""  # started, "MM-DD HH:MM" in the report's zone
    until: str = "-"  # finished, the same way
    attempts: list[AttemptLine] = []
    tokens: int = 0
    cost: float = 0.0
    branch: str = ""
    landed: bool | None = None
    folder: str = ""  # absolute path of the run's folder under state/runs/


class Nights(BaseModel):
    """Everything the HTML report shows, counted."""

    home: str
    generated: datetime
    since: datetime
    nights: list[date]
    runs: dict[str, dict[str, dict[str, int]]] = {}  # night -> loop -> outcome -> count
    tokens: dict[str, int] = {}  # night -> tokens
    cost: dict[str, float] = {}  # night -> USD
    attempts_to_success: dict[str, dict[int, int]] = {}  # loop -> attempts -> runs
    rules: dict[str, dict[str, int]] = {}  # night -> status -> rules at the night's end
    # kind -> its rules by status now (trial, active, retired, rejected) and their moves
    # since `since` (learned, promoted, demoted): the four kinds kept apart.
    kinds: dict[str, dict[str, int]] = {}
    escalations: list[OpenEscalation] = []
    ready: list[ReadyBranch] = []
    verified: dict[str, Verified] = {}  # night -> verified attempts and the judge's figures
    total_runs: int = 0
    listed: list[RunLine] = []  # the newest LISTED_MAX runs, newest first
    unlisted: int = 0  # the window's runs beyond those


def _landed(store: StateStore, run: Any) -> bool | None:
    """run.toml's `landed`, read from the file when the record model does not carry it."""
    value = getattr(run, "landed", None)
    if value is not None:
        return bool(value)
    try:
        data = read_regular(store.run_dir(run.id) / "run.toml", cap=STATE_MAX)
        raw = tomllib.loads(data.decode("utf-8")).get("landed")
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, bool) else None


def _rule_history(store: StateStore, since: datetime) -> dict[str, list[tuple[str, str]]]:
    """Per rule id, its status changes since `since`: (ts, status), oldest first."""
    out: dict[str, list[tuple[str, str]]] = {}
    for event in events_since(store, since):
        kind = event.get("type")
        if kind not in _RULE_EVENT_STATUS:
            continue
        rule = next((event[k] for k in ("rule", "rule_id", "id") if event.get(k)), "")
        if not isinstance(rule, str) or not rule:
            continue
        to = event.get("to") if event.get("to") in RULE_STATUSES else _RULE_EVENT_STATUS[kind]
        before = event.get("from") if event.get("from") in RULE_STATUSES else ""
        out.setdefault(rule, []).append((str(event.get("ts", "")), f"{before}>{to}"))
    return out


RULE_KINDS = ("failure", "decision", "knowledge", "skill")
# A rule event's count in the report's table by kind (moves since the window's start).
KIND_CHANGES = {
    "rule_accepted": "learned",
    "rule_promoted": "promoted",
    "rule_demoted": "demoted",
    "rule_retired": "demoted",
}


def _kind_counts(store: StateStore, rules_dir: Path, since: datetime) -> dict[str, dict[str, int]]:
    """Per kind: its rules by status now, and its rules' moves since `since`."""
    keys = (*RULE_STATUSES, *dict.fromkeys(KIND_CHANGES.values()))
    out = {kind: dict.fromkeys(keys, 0) for kind in RULE_KINDS}
    for stored in RuleLibrary(rules_dir).scan():
        if stored.rule.kind in out:
            out[stored.rule.kind][stored.status] += 1
    for event in events_since(store, since):
        change = KIND_CHANGES.get(str(event.get("type")))
        kind = event.get("kind")
        if change and isinstance(kind, str) and kind in out:
            out[kind][change] += 1
    return {kind: counts for kind, counts in out.items() if any(counts.values())}


def _rule_counts(
    store: StateStore, rules_dir: Path, since: datetime, ends: list[datetime]
) -> list[dict[str, int]]:
    """Rules by status at each moment of `ends`, from the files and the events since."""
    current: dict[str, tuple[str, datetime | None]] = {}
    for stored in RuleLibrary(rules_dir).scan():
        current[stored.rule.id] = (stored.status, stored.rule.created)
    history = _rule_history(store, since)
    counts = [dict.fromkeys(RULE_STATUSES, 0) for _ in ends]
    for rule in set(current) | set(history):
        changes = history.get(rule, [])
        status_now, created = current.get(rule, ("", None))
        for i, end in enumerate(ends):
            stamp = iso(end)
            before = [c for ts, c in changes if ts <= stamp]
            if before:
                status = before[-1].split(">", 1)[1]
            elif changes:
                status = changes[0][1].split(">", 1)[0]  # what the first later change moved
            elif created is None or created <= end:
                status = status_now
            else:
                status = ""
            if status in counts[i]:
                counts[i][status] += 1
    return counts


def count_nights(
    store: StateStore,
    rules_dir: Path,
    since: datetime,
    now: datetime,
    tz: tzinfo | None = None,
    branch_exists: Callable[[str, str], bool] | None = None,
    judge: str = "",
) -> Nights:
    """Count runs, tokens, cost, attempts, rules, escalations and branches since `since`;
    `judge` (the verifier's model) puts its calibration beside each night's verified count."""
    first, last = night_of(since, tz), night_of(now, tz)
    nights = [first + timedelta(days=i) for i in range((last - first).days + 1)]
    data = Nights(home=str(store.root.parent), generated=now, since=since, nights=nights)
    floor = (since - timedelta(days=1)).strftime("%Y%m%dT%H%M%SZ")
    for run_id in [i for i in store.run_ids() if i[:16] >= floor]:
        try:
            run = store.load_run(run_id)
        except (FileNotFoundError, UnreadableFile):
            continue
        if run.started < since:
            continue
        _count_run(data, store, run, tz, branch_exists)
    data.listed.sort(key=lambda line: line.started, reverse=True)
    data.unlisted = max(0, len(data.listed) - LISTED_MAX)
    del data.listed[LISTED_MAX:]
    ends = [
        datetime.combine(n + timedelta(days=1), datetime.min.time(), tz or now.astimezone().tzinfo)
        + NOON
        for n in nights
    ]
    ends = [min(e, now) for e in ends]
    for night, counts in zip(nights, _rule_counts(store, rules_dir, since, ends), strict=True):
        data.rules[night.isoformat()] = counts
    data.kinds = _kind_counts(store, rules_dir, since)
    for counted in data.verified.values():
        counted.calibrate(store.root, judge)
    for meta in open_escalations(store):
        data.escalations.append(
            OpenEscalation(
                run=meta.run,
                loop=meta.loop,
                cause=meta.cause,
                reason=meta.reason,
                escalated=meta.escalated,
                file=str(store.escalation_path(meta.run)),
                count=meta.count,
                latest_run=meta.latest_run,
            )
        )
    return data


def _count_run(
    data: Nights,
    store: StateStore,
    run: Any,
    tz: tzinfo | None,
    branch_exists: Callable[[str, str], bool] | None,
) -> None:
    """One run into its night's counts: outcome, verified, tokens, cost; a success into the
    attempts it took, and its branch (not landed, still there) into those ready to land."""
    night = night_of(run.started, tz).isoformat()
    data.total_runs += 1
    outcome = run.outcome or "running"
    # The charts carry loop names: redacted like every text the page shows.
    loop = redact(run.loop)
    data.listed.append(_run_line(store, run, night, loop, tz, branch_exists))
    per_loop = data.runs.setdefault(night, {}).setdefault(loop, {})
    per_loop[outcome] = per_loop.get(outcome, 0) + 1
    data.verified.setdefault(night, Verified()).add(run)
    if run.tokens:
        data.tokens[night] = data.tokens.get(night, 0) + run.tokens
    if run.cost_usd:
        data.cost[night] = round(data.cost.get(night, 0.0) + run.cost_usd, 6)
    if run.outcome == "succeeded":
        n = len(run.attempts)
        tries = data.attempts_to_success.setdefault(loop, {})
        tries[n] = tries.get(n, 0) + 1
        if run.branch and _landed(store, run) is not True:
            exists = branch_exists(run.repo, run.branch) if branch_exists else True
            if exists:
                data.ready.append(_ready(store, run))


def _ready(store: StateStore, run: Any) -> ReadyBranch:
    row = ReadyBranch(
        run=run.id, loop=run.loop, branch=run.branch, repo=run.repo, finished=run.finished
    )
    for attempt in run.attempts:
        stat = attempt_diffstat(store.run_dir(run.id) / f"attempt-{attempt.n}")
        if stat is not None:
            row.added += stat.added
            row.removed += stat.removed
            row.files = max(row.files, stat.total_files)
    return row


def _run_line(
    store: StateStore,
    run: Any,
    night: str,
    loop: str,
    tz: tzinfo | None,
    branch_exists: Callable[[str, str], bool] | None,
) -> RunLine:
    """The run as the page lists it: every text from its record redacted, long ones capped;
    its branch only while it is still in the repository."""
    branch = run.branch
    if branch and branch_exists is not None and not branch_exists(run.repo, branch):
        branch = ""
    attempts = [
        AttemptLine(
            n=a.n,
            exit_code=a.exit_code,
            checks={True: "passed", False: "failed"}.get(a.checks_passed, "-"),
            score=a.score,
            verdict=one_line(redact(a.verdict), 200),
            tokens=a.tokens,
        )
        for a in run.attempts
    ]
    return RunLine(
        id=redact(run.id),
        loop=loop,
        night=night,
        outcome=run.outcome or f"({run.phase})",
        cause=str(run.cause or ""),
        reason=one_line(redact(run.reason), 400),
        task=one_line(redact(run.task), 400),
        trigger=redact(run.trigger.kind),
        started=run.started,
        finished=run.finished,
        when=run.started.astimezone(tz).strftime("%m-%d %H:%M"),
        until=run.finished.astimezone(tz).strftime("%m-%d %H:%M") if run.finished else "-",
        attempts=attempts,
        tokens=run.tokens,
        cost=run.cost_usd,
        branch=redact(branch),
        landed=_landed(store, run) if branch else None,
        folder=redact(str(store.run_dir(run.id).resolve())),
    )
