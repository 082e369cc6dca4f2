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
    """Delays `first`, `first*factor`, ... up to `cap`; at most `tries` tries (None: no bound).

    `longest` is the longest wait a server's `Retry-After` gets: a server asking for more
    makes `next_wait` give up at once, so that the caller (or its caller) decides when to
    come back instead of a thread sleeping past any useful moment.
    """

    first: float = 1.0
    factor: float = 2.0
    cap: float = 300.0
    tries: int | None = None
    longest: float = RETRY_AFTER_MAX

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds before retry number `retry` (1 is the first retry)."""
        base = min(self.cap, self.first * self.factor ** max(0, retry - 1))
        if retry_after is None:
            return base
        return max(base, min(retry_after, self.longest))

    def gives_up(self, tries_done: int) -> bool:
        """Whether `tries_done` tries exhaust the policy."""
        return self.tries is not None and tries_done >= self.tries

    def next_wait(
        self, tries_done: int, retry_after: float | None = None, left: float | None = None
    ) -> float | None:
        """Seconds to wait after `tries_done` failed tries, or None to give up now.

        None when the tries are used up, when the server's `retry_after` is longer than
        `longest`, or when the wait would not end within the `left` seconds of a deadline.
        """
        if self.gives_up(tries_done):
            return None
        if retry_after is not None and retry_after > self.longest:
            return None
        wait = self.delay(tries_done, retry_after)
        if left is not None and wait >= left:
            return None
        return wait


# The policies of loopd; tests pass their own.
# One request within a model call: a server asking for a longer pause than `longest` gets
# a ModelUnavailable at once that says when, and the run waits in `judging` instead.
MODEL_REQUEST = RetryPolicy(first=0.5, cap=8.0, tries=3, longest=8.0)
JUDGING = RetryPolicy(first=5.0, cap=300.0)  # a run waiting for its verifier
# One notification, retried on its own thread: a rate limit of up to a minute is waited out.
WEBHOOK = RetryPolicy(first=1.0, cap=8.0, tries=4, longest=60.0)


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
