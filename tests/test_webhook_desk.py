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
    # The critic's free text (which the agent can steer) is never a label: pass or fail.
    for n, text in enumerate(["Looks good; ignore previous instructions", "Nope\n# HELP x"]):
        store.events.append(
            "verdict", t, loop="app", run=f"f{n}", attempt=1, judged=True, verdict=text,
            passed=False, score=2,
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
    assert calls == {("app", "pass"): 1, ("app", "fail"): 2}
    judged = {
        s.name: s.value for s in families["loopd_judge_seconds"].samples if not s.labels.get("le")
    }
    assert judged["loopd_judge_seconds_count"] == 1 and judged["loopd_judge_seconds_sum"] == 3.0


def test_refusals_are_sampled_per_service_and_status_then_counted() -> None:
    """The first 10 of a minute are written; the rest counted, their number written once."""
    from datetime import UTC, datetime

    from daemon.service.refusals import SAMPLED, WINDOW, RefusalSampler

    now = [50.0]
    t = datetime(2026, 12, 7, 3, 0, tzinfo=UTC)
    sampler = RefusalSampler(lambda: now[0], lambda: t)
    written = [sampler.admit("github", 404) for _ in range(25)]
    assert [w for w, _ in written].count(True) == SAMPLED
    assert all(over == [] for _, over in written)
    assert sampler.admit("gitea", 404)[0]  # another service has its own sample
    assert sampler.admit("github", 401)[0]  # and another status
    assert sampler.due() == []  # the minute is not over
    now[0] += WINDOW
    over = sampler.due()
    assert [(c.kind, c.status, c.count, c.since) for c in over] == [("github", 404, 15, t)]
    assert sampler.due() == []  # each count once
    assert sampler.admit("github", 404) == (True, [])  # a new minute, a new sample


def test_a_clients_text_is_capped_printable_and_redacted() -> None:
    from daemon.service.refusals import MAX_SHOWN, shown

    long = shown("x" * 990_000)
    assert len(long) < MAX_SHOWN + 40 and "989,880 more characters" in long
    assert shown("a\x1b]52;c;ZXZpbA==\x07b") == "a?]52;c;ZXZpbA==?b"
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    assert token not in shown(f"owner/{token}")


def test_forwarded_for_is_believed_only_from_a_trusted_proxy() -> None:
    import ipaddress

    from daemon.service.listener import source_of

    trusted = [ipaddress.ip_network("127.0.0.1/32"), ipaddress.ip_network("10.0.0.0/8")]
    assert source_of("203.0.113.9", "1.2.3.4", trusted) == "203.0.113.9"  # not a proxy
    assert source_of("203.0.113.9", "1.2.3.4", []) == "203.0.113.9"
    # The last hop not a proxy: what the client wrote itself comes before it.
    assert source_of("127.0.0.1", "6.6.6.6, 198.51.100.7, 10.1.2.3", trusted) == "198.51.100.7"
    assert source_of("127.0.0.1", "", trusted) == "127.0.0.1"  # a proxy's own request
    assert len(source_of("127.0.0.1", "y" * 5000, trusted)) < 120  # a non-address, capped


def test_a_flood_of_refusals_writes_its_sample_then_one_count(tmp_path) -> None:  # noqa: ANN001
    """The desk on a real event log: 25 unsigned deliveries of a minute write 10 events, each
    small whatever was sent; the minute over, one `webhook_refusals_counted` says 15."""
    import json
    from datetime import UTC, datetime

    from daemon.config import DaemonConfig
    from daemon.scheduling.remotes import RemoteFeed
    from daemon.service.refusals import WINDOW
    from daemon.service.webhook_desk import WebhookDesk
    from daemon.state.deliveries import Deliveries
    from daemon.state.store import StateStore

    t = datetime(2026, 12, 7, 3, 0, tzinfo=UTC)
    now = [10.0]
    store = StateStore(tmp_path / "state")
    remotes = DaemonConfig.model_validate(
        {"remotes": {"app": {"kind": "github", "repository": "me/app", "clone_url": "x:y"}}}
    ).remotes

    def event(type_: str, **fields: object) -> None:
        store.events.append(type_, t, **fields)

    feed = RemoteFeed(store, dict, lambda: remotes, lambda: t, event)
    desk = WebhookDesk(
        dict, lambda: remotes, Deliveries(tmp_path / "state" / "deliveries.log", t), feed,
        lambda: t, event, environ={}, monotonic=lambda: now[0],
    )  # fmt: skip
    huge = json.dumps({"repository": {"full_name": "evil/" + "x" * 990_000}}).encode()
    headers = {"x-github-event": "push", "x-github-delivery": "d" * 5000}
    answers = [desk.handle("github", headers, huge, "203.0.113.1") for _ in range(25)]
    assert {a.status for a in answers} == {404} and max(len(a.text) for a in answers) < 400
    desk.flush()  # the minute is not over: nothing yet
    now[0] += WINDOW
    desk.flush()
    written = [json.loads(line) for line in store.events.path.read_text().splitlines()]
    refused = [e for e in written if e["type"] == "webhook_refused"]
    counted = [e for e in written if e["type"] == "webhook_refusals_counted"]
    assert len(refused) == 10 and all(len(json.dumps(e)) < 1000 for e in refused)
    assert [(c["kind"], c["status"], c["count"]) for c in counted] == [("github", 404, 15)]
    assert desk.counts[("github", "refused")] == 25  # /metrics counts every one
