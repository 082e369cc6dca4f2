"""Streaks of skipped timer triggers: one event when a loop's fires start being skipped (or
held by an escalation) for a reason, one `skips_counted` when the streak ends.

A cron every minute on a held loop would otherwise write an event every minute, 1,440 a day.
Only triggers without an inbox file stream: one from the inbox may have a person waiting
for its own event (`loopd trigger --wait`), and each is recorded as before.

The daemon's streaks are kept in `state/skips.json` as they change (not synced: a kill -9
keeps the page cache), so a streak and its count outlive a kill -9: the next start goes on
counting it, and a stop or a changed reason records it whole.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from daemon.service.context import Context
from daemon.state.atomic import write_atomic
from daemon.state.events import iso
from daemon.state.eventtypes import Event

SKIPS_FILE = "skips.json"


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

    def __init__(self, ctx: Context, path: Path | None = None) -> None:
        self.ctx = ctx
        self.path = path  # where the streaks are kept across a kill -9 (None: memory only)
        self._streaks: dict[str, Streak] = self._load()

    def _load(self) -> dict[str, Streak]:
        """The streaks a daemon left (killed, or it would have recorded them); {} if none."""
        if self.path is None:
            return {}
        try:
            saved = json.loads(self.path.read_text(encoding="utf-8"))
            return {
                loop: Streak(
                    type=str(one["type"]),
                    why=str(one["why"]),
                    escalation=str(one["escalation"]),
                    since=datetime.fromisoformat(one["since"]),
                    last=datetime.fromisoformat(one["last"]),
                    count=int(one["count"]),
                )
                for loop, one in saved.items()
            }
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return {}  # torn or hand-edited: the counts start again

    def _save(self) -> None:
        if self.path is None:
            return
        data = {
            loop: {**asdict(s), "since": s.since.isoformat(), "last": s.last.isoformat()}
            for loop, s in self._streaks.items()
        }
        try:
            write_atomic(self.path, json.dumps(data, indent=1) + "\n", durable=False)
        except OSError:
            pass  # a full disk: the count goes on in memory, and is written on the next change

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
            self._save()
            return False
        self.end(loop)
        self._streaks[loop] = Streak(type, why, escalation, since=now, last=now)
        self._save()
        return True

    def end(self, loop: str) -> None:
        """`loop`'s streak is over (a fire went through, or the reason changed): record how
        many fires it skipped, when more than the one its first event recorded."""
        streak = self._streaks.get(loop)
        if streak is None:
            return
        if streak.count < 2:
            del self._streaks[loop]
            self._save()
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
        # Forgotten once recorded: a write that failed keeps it for the next try.
        self._streaks.pop(loop, None)
        self._save()

    def end_all(self) -> None:
        """loopd stops: every streak's count is recorded before the counts are lost."""
        for loop in list(self._streaks):
            self.end(loop)

    def streak(self, loop: str) -> Streak | None:
        """The streak under way for `loop`, if any."""
        return self._streaks.get(loop)
