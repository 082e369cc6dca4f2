"""The rate limit per source address on a moved clock; /metrics' observer of the event log."""

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


def test_judge_calls_and_their_latency_follow_the_event_log(tmp_path) -> None:  # noqa: ANN001
    """checks, then a judged verdict of the same attempt: one call, its seconds observed."""
    from datetime import UTC, datetime, timedelta

    import pytest

    pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    from daemon.service.metrics import Metrics
    from daemon.state.store import StateStore

    store = StateStore(tmp_path / "state")
    metrics = Metrics(store, tmp_path / "rules", lambda: {})
    store.events.observers.append(metrics.observe)
    t = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)
    store.events.append("checks", t, loop="app", run="r1", attempt=1, passed=True, results=[])
    store.events.append(
        "verdict", t + timedelta(seconds=3), loop="app", run="r1", attempt=1, judged=True,
        verdict="pass", passed=True, score=8,
    )  # fmt: skip
    store.events.append("checks", t, loop="app", run="r2", attempt=1, passed=False, results=[])
    store.events.append(
        "verdict", t, loop="app", run="r2", attempt=1, judged=False, verdict="", passed=False,
        score=None,
    )  # fmt: skip
    from prometheus_client import generate_latest

    families = {
        f.name: f
        for f in text_string_to_metric_families(generate_latest(metrics.registry).decode())
    }
    calls = {tuple(s.labels.values()): s.value for s in families["loopd_judge_calls"].samples}
    assert calls == {("app", "pass"): 1}
    judged = {
        s.name: s.value for s in families["loopd_judge_seconds"].samples if not s.labels.get("le")
    }
    assert judged["loopd_judge_seconds_count"] == 1 and judged["loopd_judge_seconds_sum"] == 3.0
