"""The verifier's reachability in status.toml, and one notification when an outage passes
`OUTAGE_NOTICE`, one more when it ends (none for a blip that ends sooner)."""

from __future__ import annotations

from datetime import datetime, timedelta

from daemon.service.context import Context
from daemon.state.eventtypes import Event
from daemon.state.records import VerifierStatus

OUTAGE_NOTICE = timedelta(minutes=10)


class VerifierWatch:
    """Reads the health that judging's calls report; notifies through `[notify]`."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._announced: datetime | None = None  # the start of the outage announced

    def tick(self, now: datetime) -> None:
        """Announce an outage past OUTAGE_NOTICE, and the end of one that was announced."""
        ctx = self.ctx
        if not ctx.config.daemon.verifier.configured:
            return
        view = ctx.services.verifier.view()
        notifications = ctx.services.notifications
        base_url = ctx.config.daemon.verifier.base_url
        if not view.reachable and view.since is not None:
            if self._announced == view.since or now - view.since < OUTAGE_NOTICE:
                return
            self._announced = view.since
            ctx.event(
                Event.VERIFIER_DOWN, since=view.since.isoformat(), error=view.last_error[:500]
            )
            if notifications is not None:
                notifications.verifier_down(base_url, view.since, view.last_error, now)
        elif view.reachable and self._announced is not None:
            since, self._announced = self._announced, None
            ctx.event(Event.VERIFIER_UP, down_since=since.isoformat())
            if notifications is not None:
                notifications.verifier_up(base_url, since, now)

    def status(self) -> VerifierStatus | None:
        """`[verifier]` of status.toml; None without a verifier."""
        if not self.ctx.config.daemon.verifier.configured:
            return None
        view = self.ctx.services.verifier.view()
        return VerifierStatus(
            reachable=view.reachable, since=view.since, last_error=view.last_error
        )
