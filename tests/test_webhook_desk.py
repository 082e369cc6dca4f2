"""The rate limit per source address on a moved clock; /metrics' observer of the event log;
each delivery judged (accepted, ignored, refused with its status) on a real state/."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

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


# -- a delivery judged: a desk on a real state/, its feed not started (nothing is fetched) --


def _desk(tmp_path, environ: dict[str, str] | None = None, **options: object):  # noqa: ANN001, ANN202
    """A desk for remotes `app` (github, secret in APP_SECRET), `lab` (gitlab, secret in
    LAB_SECRET, unset unless `environ` gives it) and `bare` (gitea, no secret_env); loop `web`
    watches `main` and `rel/*` of app, `api` its `main`, `docs` lab's `main`. `options`: the
    desk's `space`, and `early` for the feed's early triggers (the local engine's)."""
    from datetime import UTC, datetime

    from daemon.config import DaemonConfig, Loop, LoopConfig
    from daemon.scheduling.remotes import RemoteFeed
    from daemon.service.webhook_desk import WebhookDesk
    from daemon.state.deliveries import Deliveries
    from daemon.state.store import StateStore

    t = datetime(2026, 12, 7, 3, 0, tzinfo=UTC)
    store = StateStore(tmp_path / "state")
    remotes = DaemonConfig.model_validate(
        {
            "remotes": {
                "app": {
                    "kind": "github",
                    "repository": "Me/App",
                    "clone_url": "file:///nowhere",
                    "secret_env": "APP_SECRET",
                },
                "lab": {
                    "kind": "gitlab",
                    "repository": "grp/lab",
                    "clone_url": "file:///nowhere",
                    "secret_env": "LAB_SECRET",
                },
                "bare": {"kind": "gitea", "repository": "org/bare", "clone_url": "file:///x"},
            }
        }
    ).remotes

    def loop(name: str, hosted: str, *globs: str, enabled: bool = True) -> Loop:
        config = LoopConfig(
            repo=str(tmp_path), task="t", hosted=hosted, on_remote_push=list(globs), enabled=enabled
        )
        return Loop(name, tmp_path / f"{name}.toml", config)

    loops = {
        "web": loop("web", "app", "main", "rel/*"),
        "api": loop("api", "app", "main"),
        "off": loop("off", "app", "main", enabled=False),
        "docs": loop("docs", "lab", "main"),
    }

    def event(type_: str, **fields: object) -> None:
        failing = options.get("events_fail")  # a list: its errno, when set, fails each write
        if isinstance(failing, list) and failing:
            raise OSError(failing[0], os.strerror(failing[0]))
        store.events.append(type_, t, **fields)

    feed = RemoteFeed(store, lambda: loops, lambda: remotes, lambda: t, event)
    feed.early_triggers = bool(options.get("early"))
    desk = WebhookDesk(
        lambda: loops, lambda: remotes, Deliveries(tmp_path / "state" / "deliveries.log", t),
        feed, lambda: t, event, environ={"APP_SECRET": "app-secret", **(environ or {})},
        space=options.get("space"),  # type: ignore[arg-type]  # a StateSpace or None
    )  # fmt: skip
    return desk, store


def _push(ref: str = "refs/heads/main", after: str = "b" * 40, name: str = "me/app") -> bytes:
    import json

    payload = {"ref": ref, "before": "a" * 40, "after": after, "repository": {"full_name": name}}
    return json.dumps(payload).encode()


def _signed(body: bytes, delivery: str = "d-1", event: str = "push", secret: str = "app-secret"):  # noqa: ANN202
    from daemon.scheduling.webhooks import sign

    headers = {"x-github-event": event, "x-hub-signature-256": sign("github", secret, body)}
    return {**headers, **({"x-github-delivery": delivery} if delivery else {})}


def _events(store, kind: str) -> list[dict]:  # noqa: ANN001
    return [e for e in store.events.read() if e["type"] == kind]


def test_a_signed_push_a_loop_watches_is_accepted_once(tmp_path) -> None:  # noqa: ANN001
    desk, store = _desk(tmp_path)
    body = _push()
    answer = desk.handle("github", _signed(body), body, "203.0.113.1")
    assert answer.status == 202, answer.text
    assert answer.text == "accepted: loop(s) api, web; their triggers follow the fetch\n"
    (accepted,) = _events(store, "webhook_accepted")
    assert (accepted["kind"], accepted["remote"], accepted["delivery"]) == ("github", "app", "d-1")
    assert (accepted["ref"], accepted["old"], accepted["new"]) == (
        "refs/heads/main",
        "a" * 40,
        "b" * 40,
    )
    assert accepted["loops"] == ["api", "web"]  # the disabled loop is not handed the push
    assert desk.counts[("github", "accepted")] == 1
    # The same delivery again (a replay): refused, nothing accepted twice.
    again = desk.handle("github", _signed(body), body, "203.0.113.1")
    assert (again.status, again.text) == (409, "replayed delivery\n")
    assert len(_events(store, "webhook_accepted")) == 1
    # The same signed body under a new delivery id is a replay too.
    assert desk.handle("github", _signed(body, delivery="d-2"), body, "x").status == 409
    # A new push under a new id is a new delivery.
    later = _push(after="c" * 40)
    assert desk.handle("github", _signed(later, delivery="d-3"), later, "x").status == 202
    assert desk.counts[("github", "accepted")] == 2 and desk.counts[("github", "refused")] == 2


def test_a_signed_delivery_without_an_id_is_refused(tmp_path) -> None:  # noqa: ANN001
    """Without a delivery id a replay could not be told from a new push: 400, nothing taken."""
    desk, store = _desk(tmp_path)
    body = _push()
    answer = desk.handle("github", _signed(body, delivery=""), body, "203.0.113.1")
    assert answer.status == 400
    assert answer.text == "no delivery id header: a replay could not be told apart\n"
    (refused,) = _events(store, "webhook_refused")
    assert (refused["status"], refused["remote"]) == (400, "app")
    assert not _events(store, "webhook_accepted") and desk.counts[("github", "accepted")] == 0


def test_a_remote_whose_secret_is_unset_verifies_nothing(tmp_path) -> None:  # noqa: ANN001
    """GitLab's remote has LAB_SECRET unset: a delivery whose token is empty, or any token,
    is refused, and the refusal names the remote whose secret_env is unset."""
    from daemon.scheduling.webhooks import sign

    desk, store = _desk(tmp_path)
    body = b'{"ref": "refs/heads/main", "after": "' + b"b" * 40 + b'", '
    body += b'"project": {"path_with_namespace": "grp/lab"}}'
    for token in ("", " ", "guess"):
        headers = {"x-gitlab-event": "Push Hook", "x-gitlab-token": token, "idempotency-key": "k"}
        answer = desk.handle("gitlab", headers, body, "203.0.113.1")
        if token:
            assert answer.status == 403, answer.text
            assert answer.text == (
                "wrong signature (secret_env of [remotes.lab] is unset or empty)\n"
            )
        else:
            assert answer.status == 401  # an empty header is no signature at all
    # A GitHub delivery signed with the empty key (anyone can compute it) is refused too,
    # once APP_SECRET is empty.
    desk, _ = _desk(tmp_path / "empty", environ={"APP_SECRET": ""})
    signed = _push()
    answer = desk.handle("github", _signed(signed, secret=""), signed, "203.0.113.1")
    assert answer.status == 403
    assert answer.text == "wrong signature (secret_env of [remotes.app] is unset or empty)\n"
    # With the secret set, a wrong signature is only that.
    desk, _ = _desk(tmp_path / "set")
    wrong = _signed(signed, secret="not-it")
    assert desk.handle("github", wrong, signed, "x").text == "wrong signature\n"
    assert sign("github", "", signed) != sign("github", "app-secret", signed)
    assert not _events(store, "webhook_accepted")


def test_deliveries_refused_before_their_signature_is_read(tmp_path) -> None:  # noqa: ANN001
    desk, store = _desk(tmp_path)
    cases = [
        (b"{not json", 400, "the body is not JSON\n"),
        (b"[1]", 400, "the body is not a JSON object\n"),
        (_push(name="me/other"), 404, "no [remotes.NAME] of kind 'github' has repository "),
    ]
    for body, status, text in cases:
        answer = desk.handle("github", _signed(body), body, "203.0.113.1")
        assert answer.status == status and answer.text.startswith(text), answer.text
    unsigned = {"x-github-event": "push", "x-github-delivery": "d-9"}
    answer = desk.handle("github", unsigned, _push(), "203.0.113.1")
    assert (answer.status, answer.text) == (401, "unsigned delivery\n")
    # The repository is compared without case; the kind must match the remote's.
    body = _push(name="ME/APP")
    assert desk.handle("github", _signed(body, delivery="d-case"), body, "x").status == 202
    gitea = {"x-gitea-event": "push", "x-gitea-delivery": "g", "x-gitea-signature": "00"}
    assert desk.handle("gitea", gitea, _push(), "x").status == 404
    refused = _events(store, "webhook_refused")
    assert [e["status"] for e in refused] == [400, 400, 404, 401, 404]
    assert refused[0]["delivery"] == "d-1" and refused[0]["source"] == "203.0.113.1"
    assert desk.counts[("github", "refused")] == 4 and desk.counts[("gitea", "refused")] == 1


def test_signed_deliveries_that_are_no_push_to_a_watched_branch_are_ignored(tmp_path) -> None:  # noqa: ANN001
    desk, store = _desk(tmp_path)
    cases = [
        ("ping", _push(), "event 'ping' is not a push"),
        ("push", _push(ref="refs/tags/v1"), "ref 'refs/tags/v1' is not a branch"),
        ("push", _push(after="0" * 40), "the branch was deleted"),
        ("push", _push(after=""), "the branch was deleted"),
        ("push", _push(ref="refs/heads/dev"), "no loop watches this ref"),
    ]
    for n, (event, body, why) in enumerate(cases):
        answer = desk.handle("github", _signed(body, f"i-{n}", event), body, "x")
        assert (answer.status, answer.text) == (200, f"ignored: {why}\n")
    ignored = _events(store, "webhook_ignored")
    assert [e["why"] for e in ignored] == [why for _, _, why in cases]
    assert [e["ref"] for e in ignored] == [
        "",
        "refs/tags/v1",
        "refs/heads/main",
        "refs/heads/main",
        "refs/heads/dev",
    ]
    assert {(e["kind"], e["remote"]) for e in ignored} == {("github", "app")}
    assert [e["delivery"] for e in ignored] == [f"i-{n}" for n in range(5)]
    assert desk.counts[("github", "ignored")] == 5
    # A branch git itself refuses is no push any service sends: refused, not ignored.
    bad = _push(ref="refs/heads/main:refs/heads/evil")
    answer = desk.handle("github", _signed(bad, "i-bad"), bad, "x")
    assert answer.status == 400 and "is not a valid branch name" in answer.text
    # A watched glob: rel/* takes rel/1.
    rel = _push(ref="refs/heads/rel/1")
    assert desk.handle("github", _signed(rel, "i-rel"), rel, "x").status == 202


def test_a_full_state_answers_503_and_forgets_the_delivery(tmp_path) -> None:  # noqa: ANN001
    """With no room in state/, the sender is told to send again, and that retry is taken."""
    from datetime import UTC, datetime

    from daemon.state.space import StateSpace

    desk, store = _desk(tmp_path)
    space = StateSpace(store.root)
    space.hit(datetime(2026, 12, 7, 3, 0, tzinfo=UTC), "an earlier write")  # as a failed write
    desk.space = space
    body = _push()
    answer = desk.handle("github", _signed(body), body, "x")
    assert answer.status == 503 and answer.text.startswith("state/ is full")
    space.full_since = None  # room again, as the daemon's probe finds it
    assert desk.handle("github", _signed(body), body, "x").status == 202


def test_with_early_triggers_each_watching_loop_gets_its_trigger_before_the_202(tmp_path) -> None:  # noqa: ANN001
    """The local engine: the 202 names each loop's trigger, written in the inbox already with
    the push it is for (remote, branch, old and new commits, the delivery, its arrival)."""
    import json

    desk, store = _desk(tmp_path, early=True)
    body = _push(ref="refs/heads/main")
    answer = desk.handle("github", _signed(body, delivery="d-early"), body, "x")
    assert answer.status == 202, answer.text
    names = store.inbox_names()
    triggers = {}
    for name in names:
        data = json.loads((store.inbox_dir / name).read_text())
        triggers[data["loop"]] = (name, data)
    assert sorted(triggers) == ["api", "web"]
    named = "; ".join(f"loop {loop}: trigger {triggers[loop][0]}" for loop in ("api", "web"))
    assert answer.text == (
        f"accepted: {named} (its run lists it under [trigger] inbox: `loopd runs LOOP`)\n"
    )
    for _, data in triggers.values():
        assert (data["kind"], data["remote"], data["ref"]) == ("push", "app", "refs/heads/main")
        assert (data["old"], data["new"]) == ("a" * 40, "b" * 40)
        assert data["reason"] == "push to main on remote app (delivery d-early)"
        assert data["ts"].startswith("2026-12-07T03:00:00")


def test_every_refusal_names_its_delivery_and_the_remote_it_was_signed_for(tmp_path) -> None:  # noqa: ANN001
    from daemon.state.space import StateSpace

    space = StateSpace(tmp_path / "state")
    desk, store = _desk(tmp_path, space=space)
    body = _push()
    assert desk.handle("github", _signed(body, delivery="r-ok"), body, "x").status == 202
    desk.handle("github", _signed(body, delivery="r-ok"), body, "x")  # 409
    desk.handle("github", _signed(body, delivery="r-bad", secret="no"), body, "x")  # 403
    desk.handle("github", {"x-github-delivery": "r-none"}, body, "x")  # 401
    desk.handle("github", _signed(b"{", delivery="r-json"), b"{", "x")  # 400
    other = _push(name="else/where")
    desk.handle("github", _signed(other, delivery="r-404"), other, "x")  # 404
    bad = _push(ref="refs/heads/a..b")
    desk.handle("github", _signed(bad, delivery="r-ref"), bad, "x")  # 400
    space.hit(datetime_at(), "an earlier write")
    later = _push(after="c" * 40)
    desk.handle("github", _signed(later, delivery="r-full"), later, "x")  # 503
    refused = [
        (e["status"], e.get("remote"), e.get("delivery")) for e in _events(store, "webhook_refused")
    ]
    assert refused == [
        (409, "app", "r-ok"),
        (403, None, "r-bad"),
        (401, None, "r-none"),
        (400, None, "r-json"),
        (404, None, "r-404"),
        (400, "app", "r-ref"),
        (503, "app", "r-full"),
    ]


def datetime_at():  # noqa: ANN201
    from datetime import UTC, datetime

    return datetime(2026, 12, 7, 3, 0, tzinfo=UTC)


def test_a_delivery_id_is_one_services_the_same_id_elsewhere_is_new(tmp_path) -> None:  # noqa: ANN001
    desk, _ = _desk(tmp_path, environ={"LAB_SECRET": "lab-secret"})
    body = _push()
    assert desk.handle("github", _signed(body, delivery="same"), body, "x").status == 202
    lab = b'{"ref": "refs/heads/main", "after": "' + b"d" * 40 + b'", '
    lab += b'"project": {"path_with_namespace": "grp/lab"}}'
    headers = {
        "x-gitlab-event": "Push Hook",
        "x-gitlab-token": "lab-secret",
        "idempotency-key": "same",
    }
    answer = desk.handle("gitlab", headers, lab, "x")
    assert answer.status == 202, answer.text
    assert desk.handle("gitlab", headers, lab, "x").status == 409


def test_a_remote_without_secret_env_says_so_when_it_refuses(tmp_path) -> None:  # noqa: ANN001
    desk, _ = _desk(tmp_path)
    body = b'{"ref": "refs/heads/main", "repository": {"full_name": "org/bare"}}'
    headers = {"x-gitea-event": "push", "x-gitea-delivery": "g-1", "x-gitea-signature": "00"}
    answer = desk.handle("gitea", headers, body, "x")
    assert (answer.status, answer.text) == (
        403,
        "wrong signature (secret_env of [remotes.bare] is unset or empty)\n",
    )


def test_a_delivery_id_is_cut_to_200_characters(tmp_path) -> None:  # noqa: ANN001
    desk, store = _desk(tmp_path)
    body = _push()
    long_id = "L" * 150 + "M" * 100
    assert desk.handle("github", _signed(body, delivery=long_id), body, "x").status == 202
    (accepted,) = _events(store, "webhook_accepted")
    assert accepted["delivery"] == "L" * 150 + "M" * 50


def test_no_room_for_a_deliverys_triggers_answers_503_and_its_retry_is_taken(tmp_path) -> None:  # noqa: ANN001
    """state/ full when the push's triggers are to be queued (the feed's probe writes into
    /dev/full): 503, state/ marked full naming the delivery, and the delivery forgotten, so
    the sender's retry is judged afresh."""
    from daemon.state.space import PROBE_NAME

    desk, store = _desk(tmp_path, space=None)
    desk.space = store.space
    probe = store.root / PROBE_NAME
    probe.symlink_to("/dev/full")
    body = _push()
    answer = desk.handle("github", _signed(body, delivery="f-1"), body, "x")
    assert answer.status == 503 and answer.text.startswith("state/ is full"), answer.text
    assert store.space.full and store.space.what == "webhook delivery f-1"
    (refused,) = _events(store, "webhook_refused")
    assert (refused["status"], refused["remote"], refused["delivery"]) == (503, "app", "f-1")
    store.space.cleared()
    assert not probe.is_symlink()  # the probe removes what it wrote
    assert desk.handle("github", _signed(body, delivery="f-1"), body, "x").status == 202


def test_a_delivery_log_with_no_room_still_answers_and_marks_state_full(tmp_path) -> None:  # noqa: ANN001
    """The push is taken; only the delivery's id could not be written: 202 all the same,
    state/ marked full, and the replay still refused (the id is kept in memory)."""
    desk, store = _desk(tmp_path)
    desk.space = store.space
    log = tmp_path / "state" / "deliveries.log"
    log.unlink()
    log.symlink_to("/dev/full")
    body = _push()
    assert desk.handle("github", _signed(body, delivery="k-1"), body, "x").status == 202
    assert store.space.full and store.space.what == "state/deliveries.log"
    store.space.cleared()  # room again, as the daemon's probe finds it
    assert desk.handle("github", _signed(body, delivery="k-1"), body, "x").status == 409


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_a_refusal_is_answered_whatever_the_disk_says(tmp_path: Path, code: int) -> None:
    """An event log with no room: the refusal is still answered, state/ marked full; any
    other error writing the event is a bug and is raised."""
    from daemon.state.space import StateSpace

    space = StateSpace(tmp_path / "state")
    desk, _ = _desk(tmp_path, space=space, events_fail=[code])
    unsigned = {"x-github-event": "push", "x-github-delivery": "u-1"}
    if code == errno.EIO:
        with pytest.raises(OSError):
            desk.handle("github", unsigned, _push(), "x")
        assert not space.full
        return
    answer = desk.handle("github", unsigned, _push(), "x")
    assert (answer.status, answer.text) == (401, "unsigned delivery\n")
    assert space.full and space.what == "the event webhook_refused"


def test_the_rate_limits_table_of_addresses_stays_bounded() -> None:
    """A flood from many addresses: past 10,000 the full buckets are forgotten (they would
    be full again anyway); an address that spent its bucket is remembered."""
    now = [0.0]
    limit = RateLimit(per_minute=2, monotonic=lambda: now[0])
    assert limit.allow("spent") and limit.allow("spent") and not limit.allow("spent")
    for n in range(10_000):
        assert limit.allow(f"10.{n // 65536}.{n // 256 % 256}.{n % 256}")
    # 10,001 addresses, each with one of its two tokens left (full but one): all forgotten
    # on the next new address, but the spent one.
    assert limit.allow("198.51.100.1")
    assert len(limit._buckets) <= 2
    assert not limit.allow("spent")
