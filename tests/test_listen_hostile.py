"""[listen] against a hostile client: `loopd run` as a real process, real HTTP, real git.

What an unauthenticated client sends grows `state/` by a bounded number of bytes; the rate
limit believes `X-Forwarded-For` only from `trusted_proxies`; a signed body replayed under a
new delivery id is refused; a branch name with a refspec in it moves no ref of the user's;
malformed JSON of any shape is a 400 with an event; slow headers and bodies are cut off.
"""

from __future__ import annotations

import json
import socket
import uuid
from pathlib import Path

import pytest

from daemon.scheduling.webhooks import sign
from tests.helpers import daemon_log, git, make_home, runs, start_daemon, stop_daemon, wait_for
from tests.listening import (
    SECRET,
    SECRET_ENV,
    delivery,
    home_config,
    hosted,
    listening_port,
    loop_file,
    of_type,
    post,
    push_commit,
    require_module,
)

pytestmark = pytest.mark.xdist_group("listen-hostile")

require_module("uvicorn", "listen")
require_module("prometheus_client", "listen")

HUGE = 990_000


def state_bytes(home: Path) -> int:
    """Every byte under state/."""
    return sum(p.stat().st_size for p in (home / "state").rglob("*") if p.is_file())


def unsigned(full_name: str) -> tuple[dict[str, str], bytes]:
    """An unsigned GitHub push naming `full_name`."""
    body = json.dumps({"ref": "refs/heads/main", "repository": {"full_name": full_name}})
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "push",
        "X-GitHub-Delivery": str(uuid.uuid4()),
    }
    return headers, body.encode()


@pytest.fixture(scope="module")
def trusting(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """A daemon behind a 'proxy' on 127.0.0.1 (trusted_proxies), quick to time a body out."""
    tmp = tmp_path_factory.mktemp("hostile")
    origin, work, loop_repo = hosted(tmp)
    config = home_config(origin, rate_limit=1000).replace(
        "rate_limit = 1000\n",
        'rate_limit = 1000\ntrusted_proxies = ["127.0.0.1"]\nread_timeout = "1s"\n',
    )
    loops = {"all": loop_file(loop_repo, "github-r", branches='["*"]')}
    home = make_home(tmp / "home", config, loops)
    proc = start_daemon(home, env={SECRET_ENV: SECRET})
    try:
        port = wait_for(lambda: listening_port(home), what="the listener")
        yield home, port, work, loop_repo
    finally:
        stop_daemon(proc)


def test_unauthenticated_floods_grow_state_by_a_bounded_amount(trusting) -> None:  # noqa: ANN001
    home, port, _, _ = trusting
    wait_for(lambda: of_type(home, "listening"))
    before = state_bytes(home)
    answers = []
    for i in range(40):
        headers, body = unsigned("evil/" + "x" * HUGE)
        headers["X-Forwarded-For"] = f"10.77.{i}.1"
        answers.append(post(port, "/hooks/github", headers, body))
    assert {status for status, _ in answers} == {404}
    assert max(len(text) for _, text in answers) < 400  # the name is not echoed whole
    refused = wait_for(lambda: of_type(home, "webhook_refused", status=404))
    assert all(len(json.dumps(e)) < 1000 for e in refused)
    assert "more characters" in refused[0]["why"]
    # 40 requests of a megabyte each: at most the sample's events, whatever their size.
    grown = state_bytes(home) - before
    assert grown < 16_000, f"state/ grew {grown} bytes for 40 unauthenticated requests"
    assert len(refused) <= 10
    assert "x" * 1000 not in daemon_log(home)


def test_the_rate_limit_believes_forwarded_for_only_from_a_trusted_proxy(
    tmp_path: Path, trusting
) -> None:  # noqa: ANN001
    """Untrusted: every forged address is the peer's, and the third is refused 429."""
    origin, _, loop_repo = hosted(tmp_path)
    home = make_home(
        tmp_path / "home",
        home_config(origin, rate_limit=2),
        {"one": loop_file(loop_repo, "github-r")},
    )
    proc = start_daemon(home, env={SECRET_ENV: SECRET})
    try:
        port = wait_for(lambda: listening_port(home), what="the listener")
        statuses = []
        for i in range(3):
            headers, body = unsigned("someone/else")
            headers["X-Forwarded-For"] = f"203.0.113.{i}"
            statuses.append(post(port, "/hooks/github", headers, body)[0])
        assert statuses == [404, 404, 429]
        sources = {e["source"] for e in of_type(home, "webhook_refused")}
        assert sources == {"127.0.0.1"}
    finally:
        stop_daemon(proc)
    # Trusted (the module's daemon): each forwarded client is its own, and named so.
    home, port, _, _ = trusting
    headers, body = unsigned("someone/else")
    headers["X-Forwarded-For"] = "198.51.100.7, 127.0.0.1"  # the client, then a proxy hop
    # Gitea's path: GitHub's refusals of this minute may all be sampled already.
    assert post(port, "/hooks/gitea", headers, body)[0] == 404
    assert wait_for(lambda: of_type(home, "webhook_refused", source="198.51.100.7"))


def test_a_signed_body_under_a_new_delivery_id_is_a_replay(trusting) -> None:  # noqa: ANN001
    home, port, work, _ = trusting
    before, after = push_commit(work, "replayed under a new id")
    headers, body = delivery("github", "refs/heads/main", before, after)
    assert post(port, "/hooks/github", headers, body)[0] == 202
    again = {**headers, "X-GitHub-Delivery": str(uuid.uuid4())}
    status, text = post(port, "/hooks/github", again, body)
    assert status == 409, text
    wait_for(lambda: [r for r in runs(home) if r["trigger"].get("new") == after])
    assert len([r for r in runs(home) if r["trigger"].get("new") == after]) == 1


def test_a_branch_name_holding_a_refspec_moves_no_ref(trusting) -> None:  # noqa: ANN001
    home, port, work, loop_repo = trusting
    before, after = push_commit(work, "evil", branch="evil")
    headers, body = delivery("github", "refs/heads/evil:planted", before, after)
    status, text = post(port, "/hooks/github", headers, body)
    assert status == 400 and "not a valid branch name" in text
    refused = wait_for(lambda: of_type(home, "webhook_refused", status=400, remote="github-r"))
    assert "evil:planted" in refused[-1]["why"]
    # A good delivery after it is fetched as usual: the feed went through nothing bad.
    before, good = push_commit(work, "good", branch="good")
    headers, body = delivery("github", "refs/heads/good", before, good)
    assert post(port, "/hooks/github", headers, body)[0] == 202
    run = wait_for(lambda: [r for r in runs(home) if r["trigger"].get("new") == good])[0]
    # Its attempt starts only once the fetch is over.
    wait_for(lambda: of_type(home, "attempt_started", run=run["id"]), what="the good run")
    assert git(loop_repo, "rev-parse", "refs/remotes/github-r/good") == good
    refs = git(loop_repo, "for-each-ref", "--format=%(refname)")
    assert "planted" not in refs, refs


@pytest.mark.parametrize(
    "body",
    [b"[" * 400_000, b"{not json", b"[1, 2]", b'"a string"', b"\xff\xfe"],
    ids=["deep", "broken", "array", "string", "not-utf8"],
)
def test_malformed_json_of_any_shape_is_a_400_with_an_event(trusting, body: bytes) -> None:  # noqa: ANN001
    home, port, _, _ = trusting
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "push",
        "X-GitHub-Delivery": f"malformed-{uuid.uuid4()}",
        "X-Hub-Signature-256": sign("github", SECRET, body),
    }
    status, text = post(port, "/hooks/github", headers, body)
    assert status == 400, text
    assert wait_for(lambda: of_type(home, "webhook_refused", delivery=headers["X-GitHub-Delivery"]))
    assert "Traceback" not in daemon_log(home)


def test_slow_headers_are_closed_and_slow_bodies_refused(trusting) -> None:  # noqa: ANN001
    home, port, _, _ = trusting
    with socket.create_connection(("127.0.0.1", port), timeout=60) as slow:
        slow.sendall(b"POST /hooks/github HTTP/1.1\r\nHost: x\r\n")  # and never the rest
        assert slow.recv(1000) == b""  # closed by the server (read_timeout = 1s)
    with socket.create_connection(("127.0.0.1", port), timeout=60) as slow:
        slow.sendall(
            b"POST /hooks/github HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
            b"X-Forwarded-For: 192.0.2.55\r\n\r\n{"
        )  # one byte of a hundred
        answer = slow.recv(1000)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert wait_for(lambda: of_type(home, "webhook_refused", status=408, source="192.0.2.55"))


def test_bad_http_writes_no_log_line_per_request(trusting) -> None:  # noqa: ANN001
    """uvicorn's warning per invalid request would let a client grow the log without bound."""
    home, port, _, _ = trusting
    for raw in (b"GARBAGE" * 100 + b"\r\n\r\n", b"GET /\xff HTTP/1.1\r\nHost: x\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", port), timeout=60) as bad:
            bad.sendall(raw)
            assert bad.recv(100).startswith(b"HTTP/1.1 400")  # logged before it answers
    assert "Invalid HTTP request" not in daemon_log(home)


def test_connections_past_the_cap_are_closed_at_once(tmp_path: Path) -> None:
    """300 idle connections under a 5-minute read_timeout: those past 256 are closed as
    they come (each held a descriptor the daemon's runs need); the listener still answers."""
    from daemon.service.listener import MAX_CONNECTIONS
    from tests.listening import get

    home = make_home(tmp_path / "home", '[listen]\nbind = "127.0.0.1:0"\nread_timeout = "5m"\n')
    proc = start_daemon(home)
    socks: list[socket.socket] = []
    try:
        port = wait_for(lambda: listening_port(home), what="the listener")
        for _ in range(MAX_CONNECTIONS + 44):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=60))
        # Past the cap: closed by the server long before the read_timeout would.
        assert all(s.recv(1) == b"" for s in socks[MAX_CONNECTIONS + 4 :])
        for s in socks:
            s.close()
        assert wait_for(lambda: get(port, "/healthz")[0] == 200, what="healthz")
    finally:
        for s in socks:
            s.close()
        stop_daemon(proc)
