"""Repeats: a run that escalates while an escalation of its loop and task is open counts in
that escalation (count, latest run, latest evidence) instead of filing one of its own. A run
whose agent's login was refused (cause agent-login) counts in the open agent-login escalation
of its agent profile, whichever loop filed it: one per profile, not one per run.

A push-triggered loop whose agent never succeeds would otherwise file an escalation, and
send a notification, for every push. The person is told once; later repeats are told at
most once a day, as a digest (`digest_due`).
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from pathlib import Path

from daemon.people import escalation as filing
from daemon.people.escalation import _front_matter, _same_task
from daemon.people.escalation_file import Escalation, open_escalations, read_escalation
from daemon.people.escalation_text import cause_of
from daemon.people.terminal import clean
from daemon.plain.escalations import split_front_matter
from daemon.redact import redact
from daemon.state.atomic import write_atomic
from daemon.state.events import iso
from daemon.state.records import Cause, RunRecord
from daemon.state.store import StateStore

DIGEST_EVERY = timedelta(days=1)
SECTION = "## Failed again"

# Runs of one loop may finish on different worker threads: finding the open escalation and
# rewriting it is one step, or two repeats could count once or file two escalations.
_LOCK = threading.Lock()


def open_for(store: StateStore, run: RunRecord, profile: str = "") -> Escalation | None:
    """The newest open escalation an earlier run of `run`'s loop and task filed; for a refused
    login (with its agent `profile`), the open one of that profile, of any loop."""
    if run.cause == Cause.AGENT_LOGIN and profile:
        return _open_login(store, run, profile)
    redacted = redact(run.task)
    found = None
    for meta in open_escalations(store, run.loop):
        if meta.cause in ("question", Cause.AGENT_LOGIN):
            continue  # an agent's question (ask_person) is no run handed to a person; a
            # refused login stands for its profile, not for the task
        same = _same_task(meta.task, run.task) or _same_task(meta.task, redacted)
        if same and meta.run < run.id:
            found = meta
    return found


def _open_login(store: StateStore, run: RunRecord, profile: str) -> Escalation | None:
    """The newest open agent-login escalation of `profile` an earlier run filed."""
    found = None
    for meta in open_escalations(store):
        if meta.cause == Cause.AGENT_LOGIN and meta.profile == profile and meta.run < run.id:
            found = meta
    return found


def open_login(store: StateStore, profile: str) -> Escalation | None:
    """The open agent-login escalation of `profile`, if any (the oldest)."""
    for meta in open_escalations(store):
        if meta.cause == Cause.AGENT_LOGIN and meta.profile == profile:
            return meta
    return None


def escalate(
    store: StateStore, run: RunRecord, now: datetime, profile: str = ""
) -> tuple[str, bool]:
    """File `run`'s escalation, or count it in the open one of its loop and task (of its agent
    `profile`, for a refused login).

    Returns the run id of the escalation file that holds it and whether it was a repeat.
    Done again after a crash, it neither files twice nor counts twice.
    """
    with _LOCK:
        if store.escalation_path(run.id).exists():
            return run.id, False
        meta = open_for(store, run, profile)
        if meta is None:
            login = run.cause == Cause.AGENT_LOGIN
            # Looked up on its module at the call: tests stand in for it to crash here.
            if login and profile:
                filing.write_escalation(store, run, now, profile=profile)
            else:
                filing.write_escalation(store, run, now)
            return run.id, False
        if meta.latest_run != run.id:
            _count(store, meta, run, now)
        return meta.run, True


def _count(store: StateStore, meta: Escalation, run: RunRecord, now: datetime) -> None:
    path = store.escalation_path(meta.run)
    text = path.read_text(encoding="utf-8")
    parts = split_front_matter(text)
    body = parts[1] if parts else text
    cause = cause_of(run)
    meta.count += 1
    meta.latest_run = run.id
    meta.latest = now
    meta.latest_cause = str(cause) if cause else "unknown"
    meta.latest_reason = run.reason
    # The section is rewritten, not appended to: the file stays one screen however many
    # times the task fails again.
    body = body.split("\n" + SECTION + "\n", 1)[0].rstrip("\n") + "\n"
    write_atomic(path, _front_matter(meta) + clean(redact(body + "\n".join(_section(store, meta)))))


def _section(store: StateStore, meta: Escalation) -> list[str]:
    """What the latest repeat says: its run, when, why, and where its evidence is."""
    again = meta.count - 1
    times = "once" if again == 1 else f"{again} times"
    what = "later runs of the same task escalated too"
    if meta.profile:
        what = f"later runs of loops using agent profile `{meta.profile}` had their login refused"
    lines = [
        "",
        SECTION,
        "",
        f"While this escalation was open, {what}: "
        f"{times}, so {meta.count} runs in all. Each counts here instead of filing its own.",
        "",
        f"The latest, run {meta.latest_run}, escalated {iso(meta.latest or meta.escalated)} "
        f"(cause `{meta.latest_cause}`): {meta.latest_reason}",
        "",
        f"`loopd show {meta.latest_run}` has its evidence.",
    ]
    log = _latest_checks_log(store, meta.latest_run)
    if log is not None:
        lines.append(f"Its last checks' output: `state/{log.relative_to(store.root)}`.")
    lines += [
        "",
        f"`loopd escalations resolve {meta.run}` closes this escalation; a later run of the "
        "task that succeeds closes it too.",
        "",
    ]
    return lines


def _latest_checks_log(store: StateStore, run_id: str) -> Path | None:
    folder = store.run_dir(run_id)
    logs = sorted(folder.glob("attempt-*/checks.log"), key=lambda p: int(p.parent.name[8:] or 0))
    return logs[-1] if logs else None


def digest_due(store: StateStore, escalation: str, now: datetime) -> Escalation | None:
    """The escalation when its repeats are to be told now (at most once a day), marked told.

    None when nothing is new since the last notice or the last was less than a day ago.
    """
    with _LOCK:
        path = store.escalation_path(escalation)
        meta = read_escalation(path)
        if meta is None or not meta.is_open or meta.count <= meta.notified_count:
            return None
        if now - (meta.notified or meta.escalated) < DIGEST_EVERY:
            return None
        told = meta.model_copy(update={"notified": now, "notified_count": meta.count})
        text = path.read_text(encoding="utf-8")
        parts = split_front_matter(text)
        write_atomic(path, _front_matter(told) + (parts[1] if parts else text))
        return meta
