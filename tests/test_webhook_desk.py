"""The rate limit per source address, on a clock the test moves."""

from __future__ import annotations

from daemon.service.webhook_desk import RateLimit


def test_each_address_gets_its_own_bucket_refilled_evenly() -> None:
    now = [100.0]
    limit = RateLimit(per_minute=3, monotonic=lambda: now[0])
    assert [limit.allow("10.0.0.1") for _ in range(4)] == [True, True, True, False]
    assert limit.allow("10.0.0.2")  # another address is not held by the first
    now[0] += 20.0  # one delivery's worth (60 s / 3)
    assert limit.allow("10.0.0.1")
    assert not limit.allow("10.0.0.1")
    now[0] += 600.0  # a long quiet: the bucket is full again, never more
    assert [limit.allow("10.0.0.1") for _ in range(4)] == [True, True, True, False]
