"""`state/escalations/RUN_ID.md`: a run handed to a person, open until resolved.

The file is all a person needs: TOML front matter between `+++` lines holds the state
(`status = "open" | "resolved"`) that loopd reads back, the body says what happened and what
to do next. Resolving rewrites the front matter and appends a `## Resolved` section.
"""

from __future__ import annotations

import os
import tomllib
from datetime import datetime
from pathlib import Path
from typing import Literal

import tomli_w
from pydantic import BaseModel, ConfigDict, ValidationError

from daemon.people.digest import (
    best_score,
    checks_word,
    format_stat,
    last_checks_failure,
    last_diff,
    one_line,
)
from daemon.redact import redact
from daemon.state.atomic import write_atomic
from daemon.state.events import iso
from daemon.state.records import AttemptRecord, RunRecord, Trigger
from daemon.state.store import StateStore

Cause = Literal[
    "refused",
    "rule-escalate",
    "verifier-unavailable",
    "agent-failed-to-start",
    "token-cap",
    "interrupted",
    "violations",
    "timeouts",
    "critic-rejected",
    "checks-failing",
    "loopd-error",
    "unknown",
]
# Trigger kinds an open escalation holds back: the ones that would repeat the task unasked.
HELD_KINDS = frozenset({"schedule", "catch-up"})


class EscalationNotFound(LookupError):
    """No escalation file for this run id."""


class AlreadyResolved(Exception):
    """The escalation was resolved before."""


class Escalation(BaseModel):
    """The front matter of an escalation file."""

    model_config = ConfigDict(extra="ignore")

    run: str
    loop: str
    task: str
    status: Literal["open", "resolved"] = "open"
    escalated: datetime
    cause: str = "unknown"
    outcome: str = ""
    reason: str = ""
    branch: str = ""
    attempts: int = 0
    best_score: int | None = None
    resolved: datetime | None = None
    note: str = ""
    retry: bool = False
    retry_trigger: str = ""  # the inbox file of the retry, when one was queued

    @property
    def is_open(self) -> bool:
        return self.status == "open"


def _same_task(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


def _mentions(text: str, *words: str) -> bool:
    low = text.lower()
    return any(w in low for w in words)


def classify(run: RunRecord) -> Cause:
    """Why the run needs a person, from its outcome, reason and attempts."""
    reason = run.reason
    attempts = run.attempts
    if run.outcome == "refused" or _mentions(reason, "refuse"):
        return "refused"
    if _mentions(reason, "verifier", "endpoint", "critic unavailable", "unjudged", "pending"):
        return "verifier-unavailable"
    if _mentions(reason, "token"):
        return "token-cap"
    if run.outcome == "interrupted" or _mentions(reason, "interrupt", "crash", "restart"):
        return "interrupted"
    if _mentions(reason, "to start", "not start", "not found", "spawn", "no such file") or (
        attempts and all(a.exit_code in (126, 127) for a in attempts)
    ):
        return "agent-failed-to-start"
    if not attempts and _mentions(reason, "rule", "escalate"):
        return "rule-escalate"
    if run.outcome == "error":
        return "loopd-error"
    if not attempts:
        return "unknown"
    last = attempts[-1]
    if last.violations:
        return "violations"
    if last.checks_passed is True and not last.timed_out:
        return "critic-rejected"
    if any(a.checks_passed is False for a in attempts):
        return "checks-failing"
    if all(a.timed_out for a in attempts):
        return "timeouts"
    return "unknown"


def suggest(run: RunRecord, cause: Cause) -> str:
    """A next step for a person, chosen from what happened."""
    rid, loop = run.id, run.loop
    branch = f" The work so far is on branch `{run.branch}`." if run.branch else ""
    retry = f'`loopd escalations resolve {rid} --retry --note "..."`'
    rules = ", ".join(f"`{r}`" for r in run.rules_fired) or "see below"
    n = len(run.attempts)
    last = run.attempts[-1] if run.attempts else None
    if cause == "refused":
        return (
            f"A rule of severity `refuse` matched this task ({rules}). Read it with "
            "`loopd rules show ID`; if it should not apply, retire it (`loopd rules retire ID`) "
            f"or change the task in loops/{loop}.toml, then {retry}."
        )
    if cause == "rule-escalate":
        return (
            f"A rule of severity `escalate` asks for a person before any agent starts ({rules}). "
            f"Decide, then let it run with your instructions: {retry}; or drop it: "
            f"`loopd escalations resolve {rid}`."
        )
    if cause == "verifier-unavailable":
        return (
            "The verifier endpoint did not answer, so the work was never judged. Start the model "
            "server named by `[verifier] base_url` in loopd.toml (check it with "
            f"`curl BASE_URL/models`), then `loopd escalations resolve {rid} --retry`.{branch}"
        )
    if cause == "agent-failed-to-start":
        code = f" (exit code {last.exit_code})" if last and last.exit_code is not None else ""
        return (
            f"The agent did not start{code}. Check its profile in loopd.toml (adapter, command, "
            "that the program is on the daemon's PATH; under systemd that is the unit's "
            f"Environment=PATH), run `loopd once {loop}` in a terminal to see the error, then "
            f"`loopd escalations resolve {rid} --retry`."
        )
    if cause == "token-cap":
        return (
            f"The run used {run.tokens} tokens and passed `max_tokens`. Raise it in "
            f"loops/{loop}.toml or split the task into smaller loops, then {retry}.{branch}"
        )
    if cause == "interrupted":
        return (
            "loopd stopped during this run again and again (a crash or restarts). Read "
            f"`journalctl --user -u 'loopd*'` and state/events.jsonl around run {rid}, fix "
            f"the cause, then `loopd escalations resolve {rid} --retry`."
        )
    if cause == "violations":
        what = "; ".join(last.violations) if last else ""
        return (
            f"The agent changed what it may not change ({what}). If the task needs those "
            f"changes, narrow `protect` in loops/{loop}.toml; otherwise say so: {retry}."
            f"{branch}"
        )
    if cause == "critic-rejected":
        score = f"{last.score}/10" if last and last.score is not None else "too low"
        return (
            f"The checks pass but the critic scored the work {score}; read its feedback below. "
            "If the critic is wrong, review the branch and merge it yourself, then "
            f"`loopd escalations resolve {rid}`; if it is right, {retry} naming what must "
            f"change.{branch}"
        )
    if cause == "checks-failing":
        return (
            f"The checks still fail after {n} attempt{'s' if n != 1 else ''}; the last failure "
            "is below. If the cause is outside the agent's reach (a missing service, a wrong "
            "expectation), fix it and `loopd escalations resolve "
            f"{rid} --retry`; if the agent was close, point it at the cause: {retry}.{branch}"
        )
    if cause == "timeouts":
        return (
            f"Every attempt hit `attempt_timeout`. Raise it in loops/{loop}.toml or split the "
            f"task, then {retry}.{branch}"
        )
    if cause == "loopd-error":
        return (
            f"loopd itself failed on this run ({one_line(run.reason, 200)}). Look for "
            f"`run_error` in state/events.jsonl, fix the cause (often the repository or the "
            f"worktrees folder), then `loopd escalations resolve {rid} --retry`.{branch}"
        )
    return (
        f"Read the attempts below and the transcripts in state/runs/{rid}/, then {retry}, or "
        f"drop it with `loopd escalations resolve {rid}`.{branch}"
    )


def _fence(text: str) -> str:
    """A fenced block longer than any backtick run inside, so the content cannot close it."""
    longest, run = 0, 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}text\n{text}\n{ticks}"


def _quote(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in text.strip().splitlines())


def _duration(attempt: AttemptRecord) -> str:
    if attempt.finished is None:
        return ""
    seconds = int((attempt.finished - attempt.started).total_seconds())
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _attempt_section(attempt: AttemptRecord) -> list[str]:
    head = [f"checks {checks_word(attempt.checks_passed)}"]
    head.append(f"score {attempt.score}/10" if attempt.score is not None else "not scored")
    if attempt.exit_code is not None:
        head.append(f"agent exit {attempt.exit_code}")
    if attempt.timed_out:
        head.append("timed out")
    head.append(f"{attempt.nudges} nudge{'s' if attempt.nudges != 1 else ''}")
    head.append(f"{len(attempt.stalls)} stall{'s' if len(attempt.stalls) != 1 else ''}")
    if attempt.tokens:
        head.append(f"{attempt.tokens} tokens")
    if dur := _duration(attempt):
        head.append(dur)
    lines = [f"### Attempt {attempt.n}: " + ", ".join(head), ""]
    if attempt.verdict:
        lines += ["**Verdict:**", _quote(attempt.verdict), ""]
    if attempt.feedback:
        lines += ["**Feedback:**", _quote(attempt.feedback), ""]
    if attempt.violations:
        lines += ["**Violations:** " + "; ".join(attempt.violations), ""]
    for stall in attempt.stalls:
        detail = f": {one_line(stall.detail, 120)}" if stall.detail else ""
        lines.append(f"- stall ({stall.kind}) at {iso(stall.at)}{detail}")
    if attempt.stalls:
        lines.append("")
    return lines


def render(store: StateStore, run: RunRecord, meta: Escalation, suggestion: str) -> str:
    """The body of the escalation file for `run`."""
    rid = run.id
    out = [
        f"# Escalated: loop `{run.loop}`, run {rid}",
        "",
        f"**Why:** {run.reason or run.outcome or 'unresolved'} ({meta.cause})",
        "",
        f"**Suggested next step:** {suggestion}",
        "",
        "## Task",
        "",
        _quote(run.task),
        "",
    ]
    trig = run.trigger
    trig_line = f"Started {iso(run.started)} by a `{trig.kind}` trigger"
    if trig.reason:
        trig_line += f": {one_line(trig.reason)}"
    if trig.ref:
        trig_line += f" (ref `{trig.ref}`{' at ' + trig.new[:12] if trig.new else ''})"
    out += [trig_line + "."]
    if trig.retry_of:
        out += [f"It retries run {trig.retry_of}."]
    if trig.note:
        out += ["", "A person's note came with it:", _quote(trig.note)]
    finished = f"; finished {iso(run.finished)}" if run.finished else ""
    out += [f"Outcome `{run.outcome or 'unfinished'}`{finished}; {run.tokens} tokens.", ""]

    out += [f"## Attempts ({len(run.attempts)})", ""]
    if not run.attempts:
        out += ["No agent was started.", ""]
    for attempt in run.attempts:
        out += _attempt_section(attempt)

    failure = last_checks_failure(store, run)
    if failure is not None:
        out += [
            f"## Last failure of the checks (attempt {failure.attempt}, tail of checks.log)",
            "",
            _fence(failure.tail or "(checks.log is empty)"),
            "",
        ]
    elif run.attempts and run.attempts[-1].checks_passed:
        out += ["## Checks", "", "The last attempt's checks passed.", ""]

    out += ["## Rules that fired", ""]
    out += [f"- `{r}`" for r in run.rules_fired] or ["None."]
    out += [""]

    out += ["## Changes", ""]
    if run.branch:
        where = f" in {run.repo}" if run.repo else ""
        out += [f"Branch `{run.branch}`{where}."]
        if run.base_commit:
            out += [
                f"See it with `git log -p {run.base_commit[:12]}..{run.branch}`; take it "
                f"with `git merge {run.branch}`."
            ]
    diff = last_diff(store, run)
    if diff is None:
        out += ["", "The agent left no changes."]
    else:
        out += [
            "",
            f"Diff of attempt {diff.attempt}:",
            "",
            _fence("\n".join(format_stat(diff.changes))),
        ]
    out += [
        "",
        "## How to resolve",
        "",
        f'- Retry with your instructions: `loopd escalations resolve {rid} --retry --note "..."`'
        " (the note goes into the next prompt under `# Note from a person`).",
        f"- Close it without a new run: `loopd escalations resolve {rid}`.",
        f"- Everything loopd recorded: `state/runs/{rid}/`.",
        "",
    ]
    return "\n".join(out)


def _front_matter(meta: Escalation) -> str:
    # Redact each value, not the TOML text: a marker must never cut through the quoting.
    data = {
        k: redact(v) if isinstance(v, str) else v
        for k, v in meta.model_dump(mode="python", exclude_none=True).items()
    }
    return "+++\n" + tomli_w.dumps(data) + "+++\n"


def _split(text: str) -> tuple[str, str] | None:
    if not text.startswith("+++\n"):
        return None
    end = text.find("\n+++\n", 3)
    if end < 0:
        return None
    return text[4 : end + 1], text[end + 5 :]


def read_escalation(path: Path) -> Escalation | None:
    """The front matter of one escalation file; None when it is not one loopd wrote."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    parts = _split(text)
    if parts is None:
        return None
    try:
        return Escalation.model_validate(tomllib.loads(parts[0]))
    except (tomllib.TOMLDecodeError, ValidationError):
        return None


def write_escalation(
    store: StateStore, run: RunRecord, now: datetime, suggestion: str | None = None
) -> Path:
    """Write `state/escalations/RUN_ID.md` for `run` (the caller records the event `escalated`)."""
    cause = classify(run)
    meta = Escalation(
        run=run.id,
        loop=run.loop,
        task=run.task,
        escalated=now,
        cause=cause,
        outcome=run.outcome or "",
        reason=run.reason,
        branch=run.branch,
        attempts=len(run.attempts),
        best_score=best_score(run.attempts),
    )
    body = render(store, run, meta, suggestion or suggest(run, cause))
    path = store.escalation_path(run.id)
    write_atomic(path, _front_matter(meta) + "\n" + redact(body))
    return path


def list_escalations(store: StateStore) -> list[Escalation]:
    """Every escalation, oldest first."""
    folder = store.root / "escalations"
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        if name.endswith(".md") and not name.startswith("."):
            meta = read_escalation(folder / name)
            if meta is not None:
                out.append(meta)
    return out


def open_escalations(store: StateStore, loop: str | None = None) -> list[Escalation]:
    """Escalations waiting for a person, oldest first."""
    return [e for e in list_escalations(store) if e.is_open and (loop is None or e.loop == loop)]


def has_open_escalation(store: StateStore, loop: str, task: str) -> bool:
    """Whether `loop` has an open escalation for this task (whitespace-normalized)."""
    return blocking_escalation(store, loop, task) is not None


def blocking_escalation(
    store: StateStore, loop: str, task: str, kind: str = "schedule"
) -> Escalation | None:
    """The open escalation that holds back a `kind` trigger of `loop` for `task`, if any.

    Only triggers that would repeat the task unasked (schedule, catch-up) are held; a push,
    a change, a manual trigger or a retry is a new reason to run and goes ahead.
    """
    if kind not in HELD_KINDS:
        return None
    redacted = redact(task)  # the file holds the task as redacted
    for meta in open_escalations(store, loop):
        if _same_task(meta.task, task) or _same_task(meta.task, redacted):
            return meta
    return None


def load_escalation(store: StateStore, run_id: str) -> tuple[Escalation, str]:
    """The front matter and the whole text of one escalation file."""
    path = store.escalation_path(run_id)
    if "/" in run_id or run_id.startswith(".") or not path.is_file():
        raise EscalationNotFound(run_id)
    meta = read_escalation(path)
    if meta is None:
        raise EscalationNotFound(run_id)
    return meta, path.read_text(encoding="utf-8")


def resolve(
    store: StateStore, run_id: str, now: datetime, note: str = "", retry: bool = False
) -> Trigger | None:
    """Mark the escalation resolved; with `retry`, queue a retry run carrying `note`."""
    meta, text = load_escalation(store, run_id)
    if not meta.is_open:
        raise AlreadyResolved(
            f"escalation {run_id} was already resolved at {iso(meta.resolved or now)}; "
            f"to run the loop again: `loopd trigger {meta.loop}`"
        )
    trigger: Trigger | None = None
    if retry:
        trigger = Trigger(
            loop=meta.loop,
            kind="retry",
            reason=f"retry of {run_id}, asked by a person",
            ts=now,
            note=note,
            retry_of=run_id,
        )
        trigger.id = store.put_trigger(trigger).name
    meta.status = "resolved"
    meta.resolved = now
    meta.note = note
    meta.retry = retry
    meta.retry_trigger = trigger.id if trigger else ""
    parts = _split(text)
    body = parts[1] if parts else text
    section = ["", "## Resolved", "", f"Resolved {iso(now)}."]
    if note:
        section += ["", "Note:", _quote(note)]
    if trigger:
        section += ["", f"A retry was queued (`state/inbox/{trigger.id}`)."]
    write_atomic(
        store.escalation_path(run_id),
        _front_matter(meta) + redact(body.rstrip("\n") + "\n" + "\n".join(section) + "\n"),
    )
    store.events.append(
        "escalation_resolved",
        now,
        loop=meta.loop,
        run=run_id,
        note=redact(note),
        retry=retry,
        trigger=trigger.id if trigger else "",
    )
    from daemon.people.progress import update_progress  # progress reads escalations

    update_progress(store, meta.loop, now)
    return trigger
