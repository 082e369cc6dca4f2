"""The one retry policy: backoff, the tries, and a server's Retry-After."""

from __future__ import annotations

from datetime import UTC, datetime

from daemon.retry import (
    JUDGING,
    MODEL_REQUEST,
    WEBHOOK,
    RetryPolicy,
    parse_retry_after,
    retry_after_of,
)

NOW = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)


def test_backoff_doubles_up_to_the_cap() -> None:
    policy = RetryPolicy(first=1.0, cap=5.0)
    assert [policy.delay(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_retry_after_is_the_least_wait_up_to_longest() -> None:
    policy = RetryPolicy(first=1.0, cap=5.0, longest=60.0)
    assert policy.delay(1, retry_after=30.0) == 30.0
    assert policy.delay(3, retry_after=0.5) == 4.0  # the backoff when it is longer
    assert policy.delay(1, retry_after=7200.0) == 60.0  # delay() clamps; next_wait gives up


def test_next_wait_gives_up_on_tries_on_a_long_retry_after_and_past_a_deadline() -> None:
    policy = RetryPolicy(first=1.0, cap=8.0, tries=3, longest=10.0)
    assert policy.next_wait(1) == 1.0
    assert policy.next_wait(2) == 2.0
    assert policy.next_wait(3) is None  # three tries made
    assert policy.next_wait(1, retry_after=10.0) == 10.0
    assert policy.next_wait(1, retry_after=30.0) is None  # longer than it may wait
    assert policy.next_wait(1, retry_after=4.0, left=3.0) is None  # past the deadline
    assert policy.next_wait(1, left=3.0) == 1.0


def test_the_policies_of_loopd() -> None:
    assert MODEL_REQUEST.next_wait(1, retry_after=30.0) is None  # judging waits instead
    assert JUDGING.next_wait(1000, retry_after=600.0) == 600.0  # never gives up by itself
    assert WEBHOOK.next_wait(1, retry_after=30.0) == 30.0
    assert WEBHOOK.next_wait(4) is None


def test_parse_retry_after_seconds_and_http_dates() -> None:
    assert parse_retry_after("30") == 30.0
    assert parse_retry_after(" 2.5 ") == 2.5
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after("Sun, 29 Nov 2026 06:01:00 GMT", now=NOW) == 60.0
    assert parse_retry_after("Sun, 29 Nov 2026 05:00:00 GMT", now=NOW) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after("") is None and parse_retry_after(None) is None


def test_retry_after_of_headers_any_case() -> None:
    assert retry_after_of({"retry-after": "7"}) == 7.0
    assert retry_after_of({"Retry-After": "7", "Content-Type": "text/plain"}) == 7.0
    assert retry_after_of({"Content-Type": "text/plain"}) is None
    assert retry_after_of(None) is None
