"""The floor: a full `state/` stops nothing. The daemon's tick waits while `state/` has no
room (nothing it does could be recorded: a run started then would be a folder without its
record), the person is told once through [notify] (which needs no disk), and the tick goes
on by itself when a probe finds room again; the spell is then the event `state_full`.
What the listener cannot record it answers 503 meanwhile (daemon/service/webhook_desk.py).
The spell opens one escalation "state/ is full" (daemon/people/floor_escalation.py), tried
at each waiting tick and written when room returns at the latest; it stays for the person.
"""

from __future__ import annotations

import sys
from datetime import datetime

from daemon.people.floor_escalation import file_full, spell_ended, unended
from daemon.service.context import Context
from daemon.state.eventtypes import Event
from daemon.state.space import no_space


class Floor:
    """Watches `state/`'s room for the daemon's tick."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._told = False  # this spell was notified
        self._escalation = ""  # this spell's escalation, once written
        self._looked = False  # for one an earlier life left unended (read once per spell)

    @property
    def space(self):  # noqa: ANN201 - daemon.state.space.StateSpace
        return self.ctx.store.space

    def hit(self, exc: BaseException, now: datetime, what: str) -> bool:
        """A write failed: True when it was for want of space (the tick waits from now on)."""
        if not no_space(exc):
            return False
        if self.space.hit(now, what):
            print(f"loopd: state/ is full ({what}: {exc}); waiting for room", file=sys.stderr)
        return True

    def blocked(self, now: datetime) -> bool:
        """Whether the tick must wait: `state/` is full and a probe finds no room yet."""
        space = self.space
        if not space.full:
            return False
        if not self._told:
            self._told = True
            notifications = self.ctx.services.notifications
            if notifications is not None:
                notifications.state_full(self.ctx.home.root, space.what, now)
        if not self._escalation:
            self._escalate(now)  # a small file may fit before the probe does
        if not space.probe():
            return True
        spell = space.cleared()
        if spell is None:
            return False
        since, what, refused = spell
        seconds = round(max(0.0, (now - since).total_seconds()), 3)
        try:
            if not self._escalation:
                self._escalation = file_full(self.ctx.store, since, what, now)
            self.ctx.event(
                Event.STATE_FULL,
                since=since.isoformat(),
                what=what,
                seconds=seconds,
                refused=refused,
                escalation=self._escalation,
            )
        except OSError as exc:
            if self.hit(exc, since, what):
                return True  # full again at once: the same spell goes on
            raise
        self._ended(now, seconds, refused)
        print("loopd: state/ has room again; going on", file=sys.stderr, flush=True)
        return False

    def _escalate(self, now: datetime) -> None:
        """File the spell's escalation if a write of its size fits now (else a later tick)."""
        space = self.space
        since = space.full_since
        if since is None:
            return
        try:
            if not self._looked:  # a read: it works on a full disk
                self._looked = True
                self._escalation = unended(self.ctx.store)
                if self._escalation:
                    return
            self._escalation = file_full(self.ctx.store, since, space.what, now)
        except OSError:  # no room yet (or none to read the others): tried again, and on room
            return
        print(
            f"loopd: escalation {self._escalation}: state/escalations/{self._escalation}.md",
            file=sys.stderr,
            flush=True,
        )

    def _ended(self, now: datetime, seconds: float, refused: int) -> None:
        """The spell is over: its escalation says how it ended (best effort: the event
        `state_full` has it too); the next spell is told and escalated anew."""
        try:
            spell_ended(self.ctx.store, self._escalation, now, seconds, refused)
        except OSError:
            pass
        self._told = False
        self._escalation = ""
        self._looked = False
