"""Whether the verifier answers: fed by every judging call, read by the daemon's status board
and its outage notifications."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class HealthView:
    """One consistent reading of the verifier's health."""

    reachable: bool
    since: datetime | None  # when it became what it is (None: never called yet)
    last_error: str


class VerifierHealth:
    """The verifier's reachability as the last model call found it; any thread may report."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reachable = True
        self._since: datetime | None = None
        self._last_error = ""

    def answered(self, now: datetime) -> None:
        """A call got its answer."""
        with self._lock:
            if not self._reachable or self._since is None:
                self._reachable, self._since = True, now

    def failed(self, error: str, now: datetime) -> None:
        """A call found the endpoint unavailable (after its own retries)."""
        with self._lock:
            if self._reachable:
                self._reachable, self._since = False, now
            self._last_error = error[:500]

    def view(self) -> HealthView:
        with self._lock:
            return HealthView(self._reachable, self._since, self._last_error)
