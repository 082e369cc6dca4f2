"""The escalation "state/ is full": one per spell of a full `state/`, filed by the home (no
run's), cause `state-full`, in `state/escalations/ID.md` like a run's (ID: when the spell
began, `YYYYMMDDTHHMMSSZ-state-full`).

It is written as soon as a write of its size fits (while the spell lasts, or when room
returns at the latest: daemon/service/floor.py tries), and once per spell: the same ID is
written again only to add how the spell ended. It stays open for the person, who resolves
it once they know what filled the disk; loopd does not close it by itself (the disk may
fill again for the same reason).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from daemon.people.escalation import _front_matter
from daemon.people.escalation_file import Escalation, open_escalations, read_escalation
from daemon.people.next_steps import SUGGESTIONS
from daemon.people.terminal import clean
from daemon.plain.escalations import split_front_matter
from daemon.redact import redact
from daemon.state.atomic import write_atomic
from daemon.state.events import iso
from daemon.state.records import Cause
from daemon.state.store import StateStore

TASK = "state/ is full"
ENDED = "## Room again"


def escalation_id(since: datetime) -> str:
    """The escalation's id for the spell that began at `since`."""
    return f"{since.astimezone(UTC):%Y%m%dT%H%M%SZ}-state-full"


def file_full(store: StateStore, since: datetime, what: str, now: datetime) -> str:
    """Write the spell's escalation unless it is there (OSError when it does not fit); its id."""
    eid = escalation_id(since)
    path = store.escalation_path(eid)
    if path.exists():
        return eid
    meta = Escalation(
        run=eid,
        loop="",
        task=TASK,
        escalated=now,
        cause=Cause.STATE_FULL.value,
        outcome="",
        reason=f"state/ has no room since {iso(since)} ({what} found none)",
        notified=now,  # the person was told through [notify] as the spell began
    )
    body = [
        f"# state/ is full (escalation {eid})",
        "",
        f"Since {iso(since)}, writes to {store.root} find no room: {what} failed first. "
        "loopd stays up: its tick waits (no run starts while nothing about it could be "
        "recorded), webhook deliveries are answered 503 for their senders to retry, and it "
        "goes on by itself once a write fits again.",
        "",
        "## Next step",
        "",
        SUGGESTIONS[Cause.STATE_FULL].format(rid=eid),
        "",
    ]
    write_atomic(path, _front_matter(meta) + "\n" + clean(redact("\n".join(body))))
    return eid


def unended(store: StateStore) -> str:
    """An open escalation of a spell that has not ended ("" none): a daemon that stopped
    while `state/` was full left it, and it stands for the spell that goes on."""
    for meta in open_escalations(store):
        if meta.cause == Cause.STATE_FULL and not _has_ended(store.escalation_path(meta.run)):
            return meta.run
    return ""


def _has_ended(path: Path) -> bool:
    try:
        return f"\n{ENDED}\n" in path.read_text(encoding="utf-8")
    except OSError:
        return False


def spell_ended(
    store: StateStore, eid: str, now: datetime, seconds: float, refused: int
) -> Path | None:
    """Add how the spell ended to its escalation (once); the file, or None when it is gone."""
    path = store.escalation_path(eid)
    meta = read_escalation(path)
    if meta is None:
        return None
    text = path.read_text(encoding="utf-8")
    parts = split_front_matter(text)
    body = parts[1] if parts else text
    if f"\n{ENDED}\n" in body:
        return path
    section = [
        "",
        ENDED,
        "",
        f"Room returned {iso(now)}: state/ was full for {seconds:.0f} s, and {refused} "
        "write(s) were refused meanwhile (the event `state_full` has the spell). This "
        f"escalation stays open until you resolve it: `loopd escalations resolve {eid}`.",
        "",
    ]
    write_atomic(
        path, _front_matter(meta) + clean(redact(body.rstrip("\n") + "\n" + "\n".join(section)))
    )
    return path
