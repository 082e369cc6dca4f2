"""`[listen]` and `[remotes]` at the Temporal home: a real dev server, a real `loopd run`, real
HTTP with signed deliveries, real git. The home serves webhooks, /metrics and /healthz and
polls remotes as the local daemon does; a delivered or polled commit is fetched into the loop's
repository before the run's tree is made from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import git, talk, wait_for
from tests.listening import (
    SECRET,
    SECRET_ENV,
    delivery,
    get,
    listening_port,
    post,
    push_commit,
    require_module,
)
from tests.machines import BUGGY, TASK, Cluster, command_agent, make_cluster

require_module("uvicorn", "listen")
require_module("prometheus_client", "listen")

LOOP = {
    "task": TASK,
    "agent": "a",
    "done_when": [],
    "attempt_timeout": "120s",
    "max_nudges": 0,
    "max_attempts": 1,
    "critic": "off",
    "hosted": "gh",
    "on_remote_push": ["main"],
    "base": "gh/main",  # start from the pushed commit (docs/hosted.md)
}


def hosted_cluster(
    tmp_path: Path, temporal: Any, listen: bool, **loop: Any
) -> tuple[Cluster, Path, Path]:
    """A Temporal home (no other worker) whose loop follows remote `gh`, a bare 'hosted'
    repository; the agent writes the commit its tree starts on to `talk/base`."""
    server, namespace = temporal
    shared, sandbox = talk(tmp_path)
    origin = tmp_path / "hosted" / "origin.git"
    config = sandbox + (
        f'\n[remotes.gh]\nkind = "github"\nrepository = "Codertocat/Hello-World"\n'
        f'clone_url = "file://{origin}"\nsecret_env = "{SECRET_ENV}"\n'
    )
    if listen:
        config += '\n[listen]\nbind = "127.0.0.1:0"\n'
    script = (
        "import pathlib, subprocess\n"
        "head = subprocess.run(['git', 'rev-parse', 'HEAD'], capture_output=True, text=True)\n"
        f"pathlib.Path({str(shared / 'base')!r}).write_text(head.stdout.strip())\n"
    )
    agents = command_agent("a", script)
    loop_settings = {**LOOP, **loop}
    cluster = make_cluster(
        tmp_path, server.address, namespace, BUGGY, agents, loop_settings, workers=0, config=config
    )
    # The hosted repository: the loop's repository is a clone of it, a person pushes to it.
    origin.parent.mkdir(parents=True)
    git(tmp_path, "clone", "-q", "--bare", str(cluster.home.repo), str(origin))
    work = tmp_path / "hosted" / "work"
    git(tmp_path, "clone", "-q", str(origin), str(work))
    for key, value in (("user.email", "p@example.com"), ("user.name", "Person")):
        git(work, "config", key, value)
    return cluster, work, shared


def the_run(cluster: Cluster, new: str) -> list[dict[str, Any]]:
    found = [r for r in cluster.home.runs() if r["trigger"].get("new") == new]
    return found if found and all(r.get("outcome") for r in found) else []


def test_a_signed_push_delivery_to_the_temporal_home_starts_a_run_on_that_commit(
    tmp_path: Path, temporal: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_ENV, SECRET)
    cluster, work, shared = hosted_cluster(tmp_path, temporal, listen=True)
    home = cluster.home
    try:
        home.start("run")
        port = wait_for(lambda: listening_port(home.home), what="the home's listener")
        (listening,) = home.events("listening")
        assert listening["bind"] == "127.0.0.1:0" and listening["port"] == port
        status, text = get(port, "/healthz")
        assert status == 200, text
        before, after = push_commit(work, "pushed to the hosted repository")
        headers, body = delivery("github", "refs/heads/main", before, after)
        status, text = post(port, "/hooks/github", headers, body)
        assert status == 202, text
        (run,) = wait_for(lambda: the_run(cluster, after), timeout=120, what="the pushed run")
        assert run["loop"] == "calc"
        assert run["trigger"]["kind"] == "push" and run["trigger"]["remote"] == "gh"
        assert run["trigger"]["old"] == before
        # Fetched before the run's tree was made: the tree starts on the delivered commit.
        assert git(home.repo, "rev-parse", "refs/remotes/gh/main") == after
        assert (shared / "base").read_text() == after
        (accepted,) = home.events("webhook_accepted")
        assert accepted["loops"] == ["calc"] and accepted["new"] == after
        status, text = get(port, "/metrics")
        assert status == 200, text
        metrics = [line for line in text.splitlines() if not line.startswith("#")]
        assert any(line.startswith("loopd_webhook_deliveries_total") for line in metrics), text
        assert any(line.startswith("loopd_heartbeat_age_seconds") for line in metrics), text
    finally:
        cluster.stop()


def test_a_poll_of_a_remote_by_the_temporal_home_finds_a_new_commit_and_starts_a_run(
    tmp_path: Path, temporal: Any
) -> None:
    cluster, work, shared = hosted_cluster(tmp_path, temporal, listen=False, poll="1s")
    home = cluster.home
    try:
        home.start("run")
        # The first poll fetches what is there and starts nothing.
        first = git(work, "rev-parse", "HEAD")
        wait_for(
            lambda: git(home.repo, "for-each-ref", "refs/remotes/gh/main") != "",
            timeout=60,
            what="the first poll's fetch",
        )
        assert git(home.repo, "rev-parse", "refs/remotes/gh/main") == first
        before, after = push_commit(work, "pushed, no webhook")
        (run,) = wait_for(lambda: the_run(cluster, after), timeout=120, what="the polled run")
        assert run["trigger"]["kind"] == "push" and run["trigger"]["remote"] == "gh"
        assert run["trigger"]["old"] == before
        assert (shared / "base").read_text() == after
        assert not home.events("remote_poll_failed")
        assert not home.events("listening")
    finally:
        cluster.stop()


def test_a_home_whose_listen_port_is_taken_does_not_start(
    tmp_path: Path, temporal: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    monkeypatch.setenv(SECRET_ENV, SECRET)
    cluster, _, _ = hosted_cluster(tmp_path, temporal, listen=False)
    home = cluster.home
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        toml = home.home / "loopd.toml"
        toml.write_text(toml.read_text() + f'\n[listen]\nbind = "127.0.0.1:{port}"\n')
        proc = home.loopd("run", timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert str(port) in proc.stderr, proc.stderr
    assert json.dumps(port) not in json.dumps(home.events("listening"))


def test_a_delivery_to_a_temporal_home_with_a_full_state_is_503_until_there_is_room(
    tmp_path: Path, temporal: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As locally (tests/test_full_disk.py): the sender retries a 503; once the home finds
    room again the same delivery is taken and its run starts."""
    from tests.test_full_disk import fill, free, tmpfs

    monkeypatch.setenv(SECRET_ENV, SECRET)
    cluster, work, shared = hosted_cluster(tmp_path, temporal, listen=True)
    home = cluster.home
    with tmpfs(home.home / "state", "8m") as state:
        try:
            home.start("run")
            port = wait_for(lambda: listening_port(home.home), what="the home's listener")
            before, after = push_commit(work, "pushed while state/ is full")
            headers, body = delivery("github", "refs/heads/main", before, after)
            fill(state)
            status, text = post(port, "/hooks/github", headers, body)
            assert status == 503, text
            assert home.proc is not None and home.proc.poll() is None, home.log.read_text()
            free(state)
            statuses: list[int] = []
            wait_for(
                lambda: (
                    statuses.append(post(port, "/hooks/github", headers, body)[0])
                    or 202 in statuses
                ),
                what="the retried delivery taken",
            )
            assert set(statuses) <= {503, 202} and statuses[-1] == 202, statuses
            (run,) = wait_for(lambda: the_run(cluster, after), timeout=120, what="the run")
            assert (shared / "base").read_text() == after
        finally:
            cluster.stop()
