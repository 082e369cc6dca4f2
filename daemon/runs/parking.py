"""Parking a run on its agent's usage limit, and resuming the same session after the reset.

A session that ends on a quota is neither a failed attempt nor a stall. The run is parked:
phase `waiting`, `resume_at` in run.toml (the reset the agent named, plus a minute; with no
reset named, 30 minutes doubling with each park in a row, up to 4 hours), its profile held
until then (`state/quota.toml`: new runs of the profile wait too), one `quota_wait` event,
and at most one notification (`notify_on = ["waiting"]`). While parked it holds no run slot
and `attempt_timeout` does not run. A park that would end more than `[limits] max_wait`
after the first park in a row escalates the run instead (cause quota-wait-exceeded).

After the wait the run takes a slot again and resumes the same session, sending again what
the agent had last been asked (Qwen Code drops the prompt of a turn the limit cut off). A
daemon that stops meanwhile leaves the run parked; the next start resumes it (recovery).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from daemon.agents.base import Resume
from daemon.config import Loop
from daemon.redact import redact
from daemon.runparts.journal import RunJournal
from daemon.runparts.services import RunServices
from daemon.runparts.stop import StopToken
from daemon.runs.slots import release_slot, take_slot
from daemon.state.atomic import write_atomic
from daemon.state.eventtypes import Event
from daemon.state.holds import QuotaHold, hold_profile
from daemon.state.records import Park
from daemon.units import format_duration

RESET_MARGIN = timedelta(minutes=1)  # a limit is waited out a minute past its reset
FIRST_WAIT = timedelta(minutes=30)  # no reset named: this, doubling with each park in a row
LONGEST_WAIT = timedelta(hours=4)
POLL = 30.0  # seconds between looks at the clock while parked (a stop ends the wait at once)
ASKED_FILE = "asked.md"
RESUME_NOTE = (
    "The usage limit that stopped you has reset. Your last request was cut off by it; "
    "here it is again.\n\n"
)


@dataclass
class Asked:
    """What the agent was last asked: what a resume after the limit sends again."""

    text: str
    whole_prompt: bool  # a whole prompt for a new session, not a message to the session


def resume_time(reset: datetime | None, parks: int, now: datetime) -> tuple[datetime, bool]:
    """When to resume after park number `parks` in a row, and whether a reset was named."""
    if reset is not None and reset > now:
        return reset + RESET_MARGIN, True
    wait = min(LONGEST_WAIT, FIRST_WAIT * 2 ** max(0, parks - 1))
    return now + wait, False


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


class Parking:
    """The quota parks of one attempt (see the module docstring)."""

    def __init__(
        self,
        services: RunServices,
        loop: Loop,
        journal: RunJournal,
        stop: StopToken,
        transcript: Any,
        n: int,
    ) -> None:
        self.services = services
        self.loop = loop
        self.journal = journal
        self.stop = stop
        self.transcript = transcript
        self.n = n
        # False on a Temporal worker: the home holds the profile and notifies, the engine waits.
        self.holds_here = True
        self.hold: Any = None  # the QuotaHold of the last park (a QuotaHold)

    @property
    def parked(self) -> Park | None:
        """The run's park of this attempt, when it has one."""
        park = self.journal.run.park
        return park if park is not None and park.attempt == self.n else None

    def park(self, hit: Any, session_id: str, asked: Asked, used_seconds: float) -> str:
        """Park the run on `hit` (a QuotaHit); "" when parked, else why it escalates instead."""
        run, journal = self.journal.run, self.journal
        now = journal.now()
        before = self.parked
        count = before.count + 1 if before else 1
        since = before.since if before else now
        resume_at, named = resume_time(hit.reset_at, count, now)
        profile = self.loop.config.agent
        message = redact(hit.message)
        self.hold = QuotaHold(
            resume_at=resume_at, since=now, run=run.id, loop=run.loop, message=message[-300:]
        )
        if self.holds_here:
            hold_profile(self.services.store, profile, self.hold)
        limit = self.services.config.limits.max_wait
        if resume_at - since > limit:
            return (
                f"the usage limit of agent profile {profile!r} lifts at {_when(resume_at)}, "
                f"more than [limits] max_wait ({format_duration(limit)}) after the wait began"
            )
        write_atomic(journal.attempt_dir(self.n) / ASKED_FILE, redact(asked.text))
        run.park = Park(
            profile=profile,
            attempt=self.n,
            started=now,
            since=since,
            count=count,
            message=message[-2000:],
            reset_named=named,
            session_id=session_id,
            used_seconds=round(used_seconds, 3),
            asked_whole=asked.whole_prompt,
        )
        # Parked holds no run slot: given back before anyone can read the run as waiting.
        release_slot(self.services.slots, run.id)
        run.phase = "waiting"
        run.resume_at = resume_at
        journal.save()
        fields = {"resume_at": resume_at.isoformat(), "reset_named": named, "count": count}
        journal.event(
            Event.QUOTA_WAIT, attempt=self.n, profile=profile, message=message[-300:], **fields
        )
        self.transcript.write_loopd(now, "quota", message=message[-300:], **fields)
        if self.holds_here:
            self._notify()
        if self.services.on_park is not None:
            self.services.on_park(run)
        return ""

    def _notify(self) -> None:
        run = self.journal.run
        notifications = self.services.notifications
        if run.park is None or run.park.notified or notifications is None:
            return
        if "waiting" not in self.loop.config.notify_on:
            return
        notifications.quota_wait(run, self.journal.now())
        run.park.notified = True
        self.journal.save()

    def wait(self) -> None:
        """Sleep, holding no run slot, until `resume_at`; then take a slot and go on."""
        run, journal, stop = self.journal.run, self.journal, self.stop
        park = self.parked
        assert park is not None and run.resume_at is not None
        release_slot(self.services.slots, run.id)  # after a restart it was given one
        while True:
            left = (run.resume_at - self.services.clock()).total_seconds()
            if left <= 0:
                break
            journal.beat()  # parked is not wedged
            if stop.wait(min(POLL, left)):
                stop.raise_if_stopped()
        take_slot(self.services.slots, run.id, stop, journal.beat)
        now = journal.now()
        waited = max(0, int((now - park.started).total_seconds()))
        run.waited += waited
        run.phase = "running"
        run.resume_at = None
        journal.save()
        journal.event(Event.QUOTA_RESUMED, attempt=self.n, waited_seconds=waited)
        self.transcript.write_loopd(now, "quota_resumed", waited_seconds=waited)

    def asked(self) -> Asked:
        """What the parked session had been asked (kept in the attempt's folder)."""
        park = self.parked
        assert park is not None
        path = self.journal.attempt_dir(self.n) / ASKED_FILE
        return Asked(path.read_text(encoding="utf-8"), park.asked_whole)

    def resume_invocation(self, adapter: Any) -> Any:
        """The process that resumes the parked session: not a nudge, the same request again."""
        park = self.parked
        assert park is not None
        asked = self.asked()
        if adapter.session_resume and (park.session_id or not adapter.resume_needs_id):
            message = RESUME_NOTE + asked.text
            return adapter.invocation(message, Resume(park.session_id, message))
        return adapter.invocation(asked.text)

    def passed(self) -> None:
        """A session ended without hitting the limit: the parks in a row are over."""
        if self.parked is not None:
            self.journal.run.park = None
            self.journal.save()
