"""The floor: a full `state/` stops nothing. The daemon's tick waits while `state/` has no
room (nothing it does could be recorded: a run started then would be a folder without its
record), the person is told once through [notify] (which needs no disk), and the tick goes
on by itself when a probe finds room again; the spell is then the event `state_full`.
What the listener cannot record it answers 503 meanwhile (daemon/service/webhook_desk.py).
"""

from __future__ import annotations

import sys
from datetime import datetime

from daemon.service.context import Context
from daemon.state.eventtypes import Event
from daemon.state.space import no_space


class Floor:
    """Watches `state/`'s room for the daemon's tick."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._told = False  # this spell was notified

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
        if not space.probe():
            return True
        spell = space.cleared()
        if spell is None:
            return False
        since, what, refused = spell
        try:
            self.ctx.event(
                Event.STATE_FULL,
                since=since.isoformat(),
                what=what,
                seconds=round(max(0.0, (now - since).total_seconds()), 3),
                refused=refused,
            )
        except OSError as exc:
            if self.hit(exc, since, what):
                return True  # full again at once: the same spell goes on
            raise
        self._told = False
        print("loopd: state/ has room again; going on", file=sys.stderr, flush=True)
        return False
