"""`state/escalations/RUN_ID.md`: a run handed to a person, open until resolved.

The file is all a person needs: TOML front matter between `+++` lines holds the state
(`status = "open" | "resolved" | "superseded"`) that loopd reads back, the body
(people/escalation_text.py) says what happened and what to do next. Resolving rewrites the
front matter and appends a `## Resolved` section; a later run of the same task that succeeds
closes it as superseded, with a `## Superseded by RUN_ID` section.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Literal

import tomli_w

from daemon.people.answers import asked, record_answer
from daemon.people.digest import best_score
from daemon.people.escalation_file import (
    Escalation as Escalation,
)
from daemon.people.escalation_file import (
    list_escalations as list_escalations,
)
from daemon.people.escalation_file import (
    open_escalations as open_escalations,
)
from daemon.people.escalation_file import (
    read_escalation as read_escalation,
)
from daemon.people.escalation_text import cause_of, quote, render
from daemon.people.next_steps import suggest
from daemon.people.progress import update_progress
from daemon.people.terminal import clean
from daemon.plain.escalations import escalation_file, split_front_matter
from daemon.redact import redact
from daemon.state.atomic import write_atomic
from daemon.state.events import iso
from daemon.state.eventtypes import Event
from daemon.state.landholds import LAND_HELD_CAUSE, lift_land_hold
from daemon.state.records import DONE_OUTCOMES, RunRecord, Trigger
from daemon.state.store import StateStore

# Trigger kinds an open escalation holds back: the ones that would repeat the task unasked.
HELD_KINDS = frozenset({"schedule", "catch-up"})


class EscalationNotFound(LookupError):
    """No escalation file for this run id."""


class AlreadyResolved(Exception):
    """The escalation was resolved before."""


def _same_task(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


def _front_matter(meta: Escalation) -> str:
    # Redact each value, not the TOML text: a marker must never cut through the quoting.
    data = {
        k: redact(v) if isinstance(v, str) else v
        for k, v in meta.model_dump(mode="python", exclude_none=True).items()
    }
    return "+++\n" + tomli_w.dumps(data) + "+++\n"


def write_escalation(
    store: StateStore,
    run: RunRecord,
    now: datetime,
    suggestion: str | None = None,
    profile: str = "",
) -> Path:
    """Write `state/escalations/RUN_ID.md` for `run` (the caller records the event `escalated`);
    `profile`: the agent profile a refused login's escalation stands for."""
    cause = cause_of(run)
    meta = Escalation(
        run=run.id,
        loop=run.loop,
        task=run.task,
        escalated=now,
        cause=str(cause) if cause else "unknown",
        outcome=run.outcome or "",
        reason=run.reason,
        branch=run.branch,
        attempts=len(run.attempts),
        best_score=best_score(run.attempts),
        notified=now,  # an escalation is always notified as it is filed
        profile=profile,
        id=run.id,
    )
    body = render(store, run, meta.cause, suggestion or suggest(run, cause))
    path = store.escalation_path(run.id)
    write_atomic(path, _front_matter(meta) + "\n" + clean(redact(body)))
    return path


def write_question(
    store: StateStore, path: Path, run: RunRecord, question: str, attempt: int, now: datetime
) -> None:
    """Write an agent's question as an escalation of cause `question` at `path`."""
    meta = Escalation(
        run=run.id,
        loop=run.loop,
        task=run.task,
        escalated=now,
        cause="question",
        reason="the agent asked a question (the run went on)",
        branch=run.branch,
        attempts=attempt,
        notified=now,
        id=path.stem,
    )
    body = (
        f"# The agent of run {run.id} asks\n\n{quote(question)}\n\n"
        f"Asked during attempt {attempt}; the run went on without the answer. Answer with "
        f'`loopd escalations resolve {path.stem} --note "..."`: your answer is kept in '
        f"state/answers/{run.loop}.md and every later run of the loop is given it (add --retry "
        "to run the task again with your note).\n"
    )
    write_atomic(path, _front_matter(meta) + "\n" + clean(redact(body)))


def write_notice(
    store: StateStore,
    escalation_id: str,
    loop: str,
    what: str,
    cause: str,
    body: str,
    now: datetime,
) -> Path:
    """An escalation that stands for no run's failure (`what`: its title, kept as its task so
    no run of a real task is held back by it nor supersedes it)."""
    meta = Escalation(
        run=escalation_id,
        loop=loop,
        task=what,
        escalated=now,
        cause=cause,
        reason=what,
        notified=now,
    )
    path = store.escalation_path(escalation_id)
    write_atomic(path, _front_matter(meta) + "\n" + clean(redact(body)))
    return path


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
        if meta.cause == "question":
            continue  # an agent's question holds nothing back
        if _same_task(meta.task, task) or _same_task(meta.task, redacted):
            return meta
    return None


def load_escalation(store: StateStore, run_id: str) -> tuple[Escalation, str]:
    """The front matter and the whole text of one escalation file."""
    path = escalation_file(store.root, run_id)
    if path is None:
        raise EscalationNotFound(run_id)
    meta = read_escalation(path)
    if meta is None:
        raise EscalationNotFound(run_id)
    return meta, path.read_text(encoding="utf-8")


def resolve(
    store: StateStore,
    run_id: str,
    now: datetime,
    note: str = "",
    retry: bool = False,
    verdict: Literal["", "good", "bad"] = "",
    by: str = "",
) -> Trigger | None:
    """Mark the escalation resolved; with `retry`, queue a retry run carrying `note`.

    `verdict`: the person's label of the run's last attempt, for `loopd calibrate`; `by`: who
    resolved it, when not the command line (`web`: the console).
    """
    meta, text = load_escalation(store, run_id)
    if not meta.is_open:
        how = f"superseded by run {meta.superseded_by}" if meta.superseded_by else "resolved"
        raise AlreadyResolved(
            f"escalation {run_id} was already {how} at {iso(meta.resolved or now)}; "
            f"to run the loop again: `loopd trigger {meta.loop}`"
        )
    trigger = _queue_retry(store, meta, run_id, now, note) if retry else None
    meta.status = "resolved"
    meta.resolved = now
    meta.note = note
    meta.retry = retry
    meta.retry_trigger = trigger.id if trigger else ""
    meta.verdict = verdict
    parts = split_front_matter(text)
    body = parts[1] if parts else text
    section = _resolved_section(now, note, verdict, trigger)
    write_atomic(
        store.escalation_path(run_id),
        _front_matter(meta) + redact(body.rstrip("\n") + "\n" + "\n".join(section) + "\n"),
    )
    store.events.append(
        Event.ESCALATION_RESOLVED,
        now,
        loop=meta.loop,
        run=run_id,
        note=redact(note),
        retry=retry,
        trigger=trigger.id if trigger else "",
        **({"by": by} if by else {}),  # the command line's lines stay as they were
    )
    if meta.cause == "question" and note.strip():  # a decision the loop's later runs are given
        _keep_answer(store, meta, run_id, asked(body), note, now)

    if meta.cause == LAND_HELD_CAUSE and lift_land_hold(store, run_id, now):
        store.events.append(Event.LAND_RESTORED, now, loop=meta.loop, escalation=run_id)
    if meta.loop:  # the home's own escalations belong to no loop's progress notes
        update_progress(store, meta.loop, now)
    return trigger


def _queue_retry(
    store: StateStore, meta: Escalation, run_id: str, now: datetime, note: str
) -> Trigger:
    """The retry trigger `resolve --retry` queues, in the inbox."""
    if not meta.loop:  # the home's own (state/ is full): no loop to run again
        raise AlreadyResolved(
            f"escalation {run_id} is the home's ({meta.cause}), not a run's: there is nothing "
            f"to retry. Fix: `loopd escalations resolve {run_id}` without --retry"
        )
    trigger = Trigger(
        loop=meta.loop,
        kind="retry",
        reason=f"retry of {run_id}, asked by a person",
        ts=now,
        note=note,
        retry_of=run_id,
    )
    trigger.id = store.put_trigger(trigger).name
    return trigger


def _keep_answer(
    store: StateStore, meta: Escalation, asked_in: str, question: str, note: str, now: datetime
) -> None:
    """Keep a person's answer to a question for the loop's later runs (people/answers.py)."""
    kept = record_answer(store, meta.loop, asked_in, question, note, now)
    store.events.append(
        Event.ANSWER_KEPT, now, loop=meta.loop, run=asked_in, file=str(kept.relative_to(store.root))
    )


def _resolved_section(now: datetime, note: str, verdict: str, trigger: Trigger | None) -> list[str]:
    """The `## Resolved` section appended to the escalation's file."""
    section = ["", "## Resolved", "", f"Resolved {iso(now)}."]
    if note:
        section += ["", "Note:", quote(note)]
    if verdict:
        section += ["", f"The last attempt was {verdict} (the person's verdict)."]
    if trigger:
        section += ["", f"A retry was queued (`state/inbox/{trigger.id}`)."]
    return section


# Outcomes of a later run of the same task that close its open escalations.
SUPERSEDING_OUTCOMES = DONE_OUTCOMES


def supersede(store: StateStore, run: RunRecord, now: datetime) -> list[str]:
    """Close the open escalations of `run`'s task that an earlier run left, when `run`
    succeeded (or was skipped: already done); they say `superseded by RUN_ID`. Returns
    their run ids. Closed, they hold back no scheduled run any more.
    """
    if run.outcome not in SUPERSEDING_OUTCOMES or run.trigger.kind == "experiment":
        return []
    closed = []
    redacted = redact(run.task)
    for meta in open_escalations(store, run.loop):
        if meta.run >= run.id:
            continue  # not earlier than this run
        if not (_same_task(meta.task, run.task) or _same_task(meta.task, redacted)):
            continue
        try:
            _, text = load_escalation(store, meta.run)
        except EscalationNotFound:
            continue
        meta.status = "superseded"
        meta.resolved = now
        meta.superseded_by = run.id
        parts = split_front_matter(text)
        body = parts[1] if parts else text
        section = [
            "",
            f"## Superseded by {run.id}",
            "",
            f"Closed {iso(now)}: a later run of the same task, {run.id}, ended `{run.outcome}`"
            f" ({run.reason}). `loopd show {run.id}` has what it did.",
        ]
        write_atomic(
            store.escalation_path(meta.run),
            _front_matter(meta) + redact(body.rstrip("\n") + "\n" + "\n".join(section) + "\n"),
        )
        store.events.append(
            Event.ESCALATION_SUPERSEDED, now, loop=meta.loop, run=meta.run, by=run.id
        )
        closed.append(meta.run)
    return closed


def held_schedules(store: StateStore, tasks: dict[str, str]) -> dict[str, Escalation]:
    """For each loop (name -> task), the open escalation holding back its schedule, if any;
    the escalation files are read once."""
    waiting = open_escalations(store)
    if not waiting:
        return {}
    out: dict[str, Escalation] = {}
    for loop, task in tasks.items():
        redacted = redact(task)
        for meta in waiting:
            if meta.loop == loop and (
                _same_task(meta.task, task) or _same_task(meta.task, redacted)
            ):
                out[loop] = meta
                break
    return out
