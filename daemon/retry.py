"""One retry policy for everything loopd retries: model requests, judging, webhooks.

Exponential backoff with a cap; a server's `Retry-After` (seconds or an HTTP date) is
honoured as the least wait. Callers pass their own `sleep` (or a stop token's `wait`), so
tests inject a policy with tiny delays instead of the code carrying delays shaped by tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

RETRY_AFTER_MAX = 3600.0  # a server asking for more than an hour is not waited for longer


@dataclass(frozen=True)
class RetryPolicy:
    """Delays `first`, `first*factor`, ... up to `cap`; at most `tries` tries (None: no bound)."""

    first: float = 1.0
    factor: float = 2.0
    cap: float = 300.0
    tries: int | None = None

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds before retry number `retry` (1 is the first retry)."""
        base = min(self.cap, self.first * self.factor ** max(0, retry - 1))
        if retry_after is None:
            return base
        return max(base, min(retry_after, RETRY_AFTER_MAX))

    def gives_up(self, tries_done: int) -> bool:
        """Whether `tries_done` tries exhaust the policy."""
        return self.tries is not None and tries_done >= self.tries


# The policies of loopd; tests pass their own.
MODEL_REQUEST = RetryPolicy(first=0.5, cap=8.0, tries=3)  # one request within a model call
JUDGING = RetryPolicy(first=5.0, cap=300.0)  # a run waiting for its verifier
WEBHOOK = RetryPolicy(first=1.0, cap=8.0, tries=4)  # one notification


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """`Retry-After` as seconds from now: a number of seconds or an HTTP date; None if absent."""
    if not value:
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def retry_after_of(headers: Mapping[str, str] | None) -> float | None:
    """The `Retry-After` of a response's headers, in seconds."""
    if not headers:
        return None
    for key, value in headers.items():
        if key.lower() == "retry-after":
            return parse_retry_after(value)
    return None
