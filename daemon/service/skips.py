"""Streaks of skipped timer triggers: one event when a loop's fires start being skipped (or
held by an escalation) for a reason, one `skips_counted` when the streak ends.

A cron every minute on a held loop would otherwise write an event every minute, 1,440 a day.
Only triggers without an inbox file stream: one from the inbox may have a person waiting
for its own event (`loopd trigger --wait`), and each is recorded as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from daemon.service.context import Context
from daemon.state.events import iso
from daemon.state.eventtypes import Event


@dataclass
class Streak:
    """The fires of one loop skipped in a row for one reason."""

    type: str  # the event the first one recorded: `held` or `trigger_skipped`
    why: str
    escalation: str  # the open escalation that holds the loop ("": not a hold)
    since: datetime
    last: datetime
    count: int = 1


class Skips:
    """Per loop, the streak of timer triggers skipped for the same reason."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._streaks: dict[str, Streak] = {}

    def first(self, loop: str, type: str, why: str, escalation: str, now: datetime) -> bool:
        """A timer trigger of `loop` is skipped: True when its event is to be written (a
        new streak), False when it only counts in the streak under way."""
        streak = self._streaks.get(loop)
        if streak is not None and (streak.type, streak.why, streak.escalation) == (
            type,
            why,
            escalation,
        ):
            streak.count += 1
            streak.last = now
            return False
        self.end(loop)
        self._streaks[loop] = Streak(type, why, escalation, since=now, last=now)
        return True

    def end(self, loop: str) -> None:
        """`loop`'s streak is over (a fire went through, or the reason changed): record how
        many fires it skipped, when more than the one its first event recorded."""
        streak = self._streaks.pop(loop, None)
        if streak is None or streak.count < 2:
            return
        fields = {"escalation": streak.escalation} if streak.escalation else {}
        self.ctx.event(
            Event.SKIPS_COUNTED,
            loop=loop,
            of=streak.type,
            why=streak.why,
            count=streak.count,
            since=iso(streak.since),
            until=iso(streak.last),
            **fields,
        )

    def end_all(self) -> None:
        """loopd stops: every streak's count is recorded before the counts are lost."""
        for loop in list(self._streaks):
            self.end(loop)

    def streak(self, loop: str) -> Streak | None:
        """The streak under way for `loop`, if any."""
        return self._streaks.get(loop)
