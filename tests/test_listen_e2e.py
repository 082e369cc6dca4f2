"""[listen] end to end: `loopd run` as a real process, real HTTP, real signatures, real git.

Each hosting kind's recorded push delivery becomes a run of the loop following it, with the
pushed commit fetched into the loop's repository first; forged, unsigned, replayed,
oversized and unknown-repository deliveries are refused with their status and start nothing.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from daemon.extras import install_command
from daemon.rules.rulefile import dump_rule
from tests.helpers import daemon_log, git, make_home, runs, start_daemon, stop_daemon, wait_for
from tests.listening import (
    SECRET,
    SECRET_ENV,
    delivery,
    get,
    home_config,
    hosted,
    listening_port,
    loop_file,
    of_type,
    post,
    post_oversized,
    push_commit,
    require_module,
)
from tests.test_rules_files import make_rule

# One daemon serves the module's tests: they stay on one worker under pytest-xdist
# (--dist loadgroup), so it starts once.
pytestmark = pytest.mark.xdist_group("listen")

require_module("uvicorn", "listen")
require_module("prometheus_client", "listen")

KINDS = ("github", "gitea", "gitlab")
RULES = [
    ("retired", "r-0001-old-lint", "failure"),
    ("retired", "r-0002-old-style", "decision"),
    ("rejected", "r-0003-wrong", "failure"),
]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """One daemon for the module: a loop per hosting kind on one hosted repository."""
    tmp = tmp_path_factory.mktemp("listen")
    origin, work, loop_repo = hosted(tmp)
    loops = {f"{kind}-loop": loop_file(loop_repo, f"{kind}-r") for kind in KINDS}
    home = make_home(tmp / "home", home_config(origin), loops)
    # Rules that never fire (retired, rejected), for /metrics' library gauge.
    for status, rule_id, kind in RULES:
        text = dump_rule(make_rule(rule_id, kind=kind))
        (home / "rules" / status / f"{rule_id}.md").write_text(text)
    proc = start_daemon(home, env={SECRET_ENV: SECRET})
    try:
        port = wait_for(lambda: listening_port(home), what="the listener")
        # The start banner says where the listener listens: the port it bound, not 0.
        banner = wait_for(lambda: daemon_log(home).partition("\n")[1] and daemon_log(home))
        assert f"[listen] on http://127.0.0.1:{port}" in banner.splitlines()[0], banner
        yield home, port, work, loop_repo
    finally:
        stop_daemon(proc)


@pytest.mark.parametrize("kind", KINDS)
def test_a_signed_push_fetches_the_commit_and_starts_the_loop(daemon, kind: str) -> None:  # noqa: ANN001
    home, port, work, loop_repo = daemon
    before, after = push_commit(work, f"pushed for {kind}")
    headers, body = delivery(kind, "refs/heads/main", before, after)
    status, text = post(port, f"/hooks/{kind}", headers, body)
    assert status == 202, text
    loop = f"{kind}-loop"
    # The answer names the trigger it queued for each loop: the run that takes it lists it.
    assert text.startswith("accepted"), text
    named = re.findall(r"loop (\S+): trigger (\S+\.json)", text)
    assert [name for name, _ in named] == [loop], text
    run = wait_for(
        lambda: [r for r in runs(home) if r["loop"] == loop and r["trigger"].get("new") == after],
        what=f"the run of {loop}",
    )[0]
    assert named[0][1] in run["trigger"]["inbox"], (text, run["trigger"])
    assert run["trigger"]["kind"] == "push"
    assert run["trigger"]["remote"] == f"{kind}-r"
    assert run["trigger"]["ref"] == "refs/heads/main"
    # The trigger came at once, the fetch meanwhile; the run made its tree (its attempt
    # started) only once the loop's repository had the pushed commit.
    wait_for(lambda: of_type(home, "attempt_started", run=run["id"]), what="the attempt")
    assert git(loop_repo, "rev-parse", f"refs/remotes/{kind}-r/main") == after
    # ... and said so in the ref ledger first, so no run's ref guard blames its agent for it.
    ledger = [json.loads(x) for x in (home / "state" / "ref-ledger.jsonl").read_text().splitlines()]
    assert {(e["ref"], e["new"]) for e in ledger} >= {(f"refs/remotes/{kind}-r/main", after)}
    accepted = of_type(home, "webhook_accepted", kind=kind, new=after)
    assert accepted and accepted[0]["loops"] == [loop]


@pytest.mark.parametrize("kind", KINDS)
def test_forged_unsigned_and_replayed_deliveries_are_refused(daemon, kind: str) -> None:  # noqa: ANN001
    home, port, work, _ = daemon
    before, after = push_commit(work, f"forged for {kind}")
    headers, body = delivery(kind, "refs/heads/main", before, after)
    forged = dict(headers)
    forged[next(h for h in headers if h.lower() in _SIGNATURES)] = (
        "sha256=" + "0" * 64 if kind == "github" else "0" * 64 if kind == "gitea" else "wrong"
    )
    assert post(port, f"/hooks/{kind}", forged, body)[0] == 403
    unsigned = {k: v for k, v in headers.items() if k.lower() not in _SIGNATURES}
    assert post(port, f"/hooks/{kind}", unsigned, body)[0] == 401
    tampered = body.replace(after.encode(), before.encode())
    if kind != "gitlab":  # GitLab's token signs no body: tampering is the token's business
        assert post(port, f"/hooks/{kind}", headers, tampered)[0] == 403
    assert post(port, f"/hooks/{kind}", headers, body)[0] == 202
    assert post(port, f"/hooks/{kind}", headers, body)[0] == 409  # the same delivery id
    refused = wait_for(lambda: of_type(home, "webhook_refused", kind=kind, why="replayed delivery"))
    assert refused[0]["status"] == 409
    # Only the one good delivery made a run of this commit.
    wait_for(lambda: [r for r in runs(home) if r["trigger"].get("new") == after])
    assert len([r for r in runs(home) if r["trigger"].get("new") == after]) == 1


_SIGNATURES = {"x-hub-signature-256", "x-gitea-signature", "x-gitlab-token"}


def test_oversized_unknown_and_unwatched_deliveries(daemon) -> None:  # noqa: ANN001
    home, port, work, _ = daemon
    before, after = push_commit(work, "unwatched")
    headers, body = delivery("github", "refs/heads/main", before, after)
    big = body[:-1] + b', "padding": "' + b"x" * 1_100_000 + b'"}'
    assert post_oversized(port, "/hooks/github", headers, big) == 413
    other = body.replace(b"Codertocat/Hello-World", b"someone/else")
    headers_other, _ = delivery("github", "refs/heads/main", before, after)
    assert post(port, "/hooks/github", headers_other, other)[0] == 404
    # A branch no loop watches: acknowledged and recorded as ignored.
    headers, body = delivery("github", "refs/heads/feature", before, after)
    status, text = post(port, "/hooks/github", headers, body)
    assert status == 200 and "ignored" in text
    ignored = wait_for(lambda: of_type(home, "webhook_ignored", ref="refs/heads/feature"))
    assert ignored[0]["why"] == "no loop watches this ref"
    assert not [r for r in runs(home) if r["trigger"].get("new") == after]
    assert of_type(home, "webhook_refused", status=413)
    assert of_type(home, "webhook_refused", status=404)


def test_healthz_and_unknown_paths(daemon) -> None:  # noqa: ANN001
    _, port, _, _ = daemon
    assert get(port, "/healthz") == (200, "ok\n")
    assert get(port, "/nothing")[0] == 404
    assert get(port, "/hooks/github")[0] == 405


def test_a_missing_extra_is_a_clear_error(tmp_path: Path) -> None:
    """Without uvicorn, [listen] stops the start with exit 2 naming the extra."""
    from tests.helpers import loopd

    shadow = tmp_path / "shadow"
    (shadow / "uvicorn").mkdir(parents=True)
    (shadow / "uvicorn" / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    home = make_home(tmp_path / "home", '[listen]\nbind = "127.0.0.1:0"\n')
    env = {"PYTHONPATH": f"{shadow}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = loopd(home, "run", env=env, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert install_command("listen") in proc.stderr
    assert "Traceback" not in proc.stderr


def test_metrics_count_the_runs_the_daemon_made(daemon) -> None:  # noqa: ANN001
    """/metrics parsed by prometheus_client's own parser agrees with the event log."""
    from prometheus_client.parser import text_string_to_metric_families

    home, port, work, _ = daemon
    before, after = push_commit(work, "for the metrics")
    headers, body = delivery("gitea", "refs/heads/main", before, after)
    assert post(port, "/hooks/gitea", headers, body)[0] == 202
    wait_for(lambda: [r for r in runs(home) if r["trigger"].get("new") == after])

    def settled() -> dict | None:
        every = runs(home)
        if not every or any("outcome" not in r for r in every):
            return None
        finished = of_type(home, "run_finished")
        return {"runs": every, "finished": finished} if len(finished) == len(every) else None

    seen = wait_for(settled, what="every run to finish")
    status, text = get(port, "/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(text)}
    expected: dict[tuple[str, str], int] = {}
    for event in seen["finished"]:
        key = (event["loop"], event["outcome"])
        expected[key] = expected.get(key, 0) + 1
    got = {
        (s.labels["loop"], s.labels["outcome"]): int(s.value)
        for s in families["loopd_runs"].samples
        if s.name == "loopd_runs_total"
    }
    assert got == expected and sum(got.values()) == len(seen["runs"])
    cost = {s.labels["loop"] for s in families["loopd_cost_usd"].samples}
    assert cost == {loop for loop, _ in expected}  # the command agent costs nothing: 0 each
    attempts = sum(s.value for s in families["loopd_attempts"].samples)
    assert attempts == len(of_type(home, "attempt_started"))
    latency = families["loopd_trigger_to_start_seconds"]
    counted = sum(s.value for s in latency.samples if s.name.endswith("_count"))
    assert counted == len(of_type(home, "run_started"))
    hooks = {
        (s.labels["kind"], s.labels["result"]): s.value
        for s in families["loopd_webhook_deliveries"].samples
        if s.name.endswith("_total")
    }
    assert hooks[("gitea", "accepted")] >= 1
    gauges = {f.name for f in families.values() if f.type == "gauge"}
    assert {"loopd_queue_depth", "loopd_open_escalations", "loopd_heartbeat_age_seconds"} <= gauges
    assert families["loopd_queue_depth"].samples[0].value == 0
    rules = {
        (s.labels["status"], s.labels["kind"]): s.value for s in families["loopd_rules"].samples
    }
    assert rules == {
        ("retired", "failure"): 1,
        ("retired", "decision"): 1,
        ("rejected", "failure"): 1,
    }


def test_missing_apprise_is_a_clear_error(tmp_path: Path) -> None:
    """Without apprise, [notify] urls stops the start with exit 2 naming the extra."""
    from tests.helpers import loopd

    shadow = tmp_path / "shadow"
    (shadow / "apprise").mkdir(parents=True)
    (shadow / "apprise" / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    home = make_home(tmp_path / "home", '[notify]\nurls = ["json://127.0.0.1:9/x"]\n')
    env = {"PYTHONPATH": f"{shadow}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = loopd(home, "run", env=env, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert install_command("notify") in proc.stderr
    assert "Traceback" not in proc.stderr


def test_forgejo_headers_on_the_forgejo_path(daemon) -> None:  # noqa: ANN001
    """Forgejo's own header names (X-Forgejo-*) are taken on /hooks/forgejo as Gitea's."""
    home, port, work, _ = daemon
    before, after = push_commit(work, "from forgejo")
    headers, body = delivery("gitea", "refs/heads/main", before, after)
    forgejo = {
        k.replace("X-Gitea-", "X-Forgejo-"): v
        for k, v in headers.items()
        if not k.startswith(("X-Gogs-", "X-GitHub-"))
    }
    assert "X-Forgejo-Signature" in forgejo and "X-Gitea-Signature" not in forgejo
    assert post(port, "/hooks/forgejo", forgejo, body)[0] == 202
    wait_for(lambda: [r for r in runs(home) if r["trigger"].get("new") == after])


def test_a_push_whose_commit_cannot_be_fetched_ends_its_run_in_error(tmp_path: Path) -> None:
    """The delivery is answered 202 (its trigger is in the inbox); the run waits for the
    fetch, which fails: the run ends `error` before any agent starts, saying why."""
    origin, work, loop_repo = hosted(tmp_path)
    config = home_config(origin).replace(f"file://{origin}", f"file://{tmp_path}/gone.git")
    home = make_home(tmp_path / "home", config, {"one": loop_file(loop_repo, "github-r")})
    proc = start_daemon(home, env={SECRET_ENV: SECRET})
    try:
        port = wait_for(lambda: listening_port(home), what="the listener")
        before, after = push_commit(work, "not fetchable")
        headers, body = delivery("github", "refs/heads/main", before, after)
        assert post(port, "/hooks/github", headers, body)[0] == 202
        ended = wait_for(lambda: of_type(home, "run_finished", loop="one"), what="the run")
        assert ended[0]["outcome"] == "error"
        assert "the pushed commit could not be fetched" in ended[0]["reason"]
        assert "gone.git" in ended[0]["reason"]
        assert of_type(home, "remote_fetch_failed", loop="one", new=after)
        assert not of_type(home, "attempt_started", loop="one")
    finally:
        stop_daemon(proc)


def test_an_accepted_delivery_survives_a_kill_of_loopd(tmp_path: Path) -> None:
    """A 202 means the trigger is in the inbox: loopd killed (SIGKILL) the moment it answers,
    before any fetch, still runs the loop on the pushed commit at its next start."""
    origin, work, loop_repo = hosted(tmp_path)
    home = make_home(
        tmp_path / "home", home_config(origin), {"one": loop_file(loop_repo, "github-r")}
    )
    proc = start_daemon(home, env={SECRET_ENV: SECRET})
    try:
        port = wait_for(lambda: listening_port(home), what="the listener")
        before, after = push_commit(work, "accepted, then loopd killed")
        headers, body = delivery("github", "refs/heads/main", before, after)
        assert post(port, "/hooks/github", headers, body)[0] == 202
    finally:
        proc.kill()
        proc.wait()
    proc = start_daemon(home, env={SECRET_ENV: SECRET})
    try:
        # Its run: made by the restarted loopd from the inbox (or, when the killed one had
        # taken the trigger in the moment left, recovered from its record).
        made = wait_for(
            lambda: [r for r in runs(home) if r["trigger"].get("new") == after and "outcome" in r],
            what="the pushed commit's run to end",
        )
        assert made[0]["trigger"]["remote"] == "github-r"
        if made[0]["outcome"] == "succeeded":
            assert git(loop_repo, "rev-parse", "refs/remotes/github-r/main") == after
    finally:
        stop_daemon(proc)


def test_a_source_past_its_rate_limit_is_refused(tmp_path: Path) -> None:
    origin, work, loop_repo = hosted(tmp_path)
    config = home_config(origin, rate_limit=2)
    home = make_home(tmp_path / "home", config, {"one": loop_file(loop_repo, "github-r")})
    proc = start_daemon(home, env={SECRET_ENV: SECRET})
    try:
        port = wait_for(lambda: listening_port(home), what="the listener")
        statuses = []
        for i in range(3):  # three pushes: the same body twice would be a replay
            before, after = push_commit(work, f"limited {i}")
            headers, body = delivery("github", "refs/heads/main", before, after)
            statuses.append(post(port, "/hooks/github", headers, body)[0])
        assert statuses == [202, 202, 429]
        refused = wait_for(lambda: of_type(home, "webhook_refused", status=429))
        assert refused[0]["source"] == "127.0.0.1"
    finally:
        stop_daemon(proc)


def test_a_taken_port_stops_the_start_with_a_clear_error(tmp_path: Path) -> None:
    import socket

    from tests.helpers import loopd

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    try:
        port = holder.getsockname()[1]
        home = make_home(tmp_path / "home", f'[listen]\nbind = "127.0.0.1:{port}"\n')
        proc = loopd(home, "run", timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert f'[listen] bind = "127.0.0.1:{port}"' in proc.stderr.replace("'", '"')
        assert "Traceback" not in proc.stderr
    finally:
        holder.close()
