"""`[notify] urls`: each notification through apprise (ntfy, Slack, Matrix, email, json://...).

One notifier per URL, so `loopd notify --test` reports each. The message is the same text the
command and the webhook get; an escalation's file is linked (a `file://` line) below it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from daemon.extras import install_command
from daemon.people.notify.base import Notifier, NotifyError

EXTRA_HINT = f"install loopd's `notify` extra: {install_command('notify')}"


def where(url: str) -> str:
    """The URL's service and host: its path and query often hold a token."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}" if host else f"{parts.scheme}://"


class AppriseNotifier(Notifier):
    """Sends through one apprise URL; NotifyError with apprise's own reason when it fails."""

    name = "apprise"

    def __init__(self, url: str) -> None:
        try:
            import apprise
        except ImportError:
            raise NotifyError(
                f"[notify] urls needs the Python package apprise; {EXTRA_HINT}"
            ) from None
        self.url = url
        self.where = where(url)
        self._apprise = apprise.Apprise()
        self._valid = bool(self._apprise.add(url))

    def send(self, message: str, payload: dict[str, Any]) -> None:
        import apprise

        if not self._valid:
            raise NotifyError(
                f"[notify] urls: {self.where} is not a URL apprise knows; see "
                "https://github.com/caronc/apprise/wiki for each service's form"
            )
        body = message
        if payload.get("file"):
            body += f"\n\nfile://{payload['file']}"
        title = f"loopd: {payload.get('kind') or 'notification'}"
        # apprise ships no types for LogCapture; its use here is covered by the notifier tests.
        with apprise.LogCapture(level=apprise.logging.WARNING) as log:  # type: ignore[no-untyped-call]
            ok = self._apprise.notify(body=body, title=title)
            said = log.getvalue().strip().splitlines()
        if not ok:
            reason = said[-1] if said else "apprise reported a failure"
            raise NotifyError(f"[notify] urls: {self.where} failed: {reason[:300]}")
