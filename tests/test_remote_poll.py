"""Polling where no webhook reaches: `poll` watches a hosted repository with git ls-remote."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from daemon.config import DaemonConfig, Loop, LoopConfig
from daemon.scheduling.remotes import RemoteFeed, RemotePoller
from daemon.state.store import StateStore
from tests.helpers import git, make_home, runs, start_daemon, stop_daemon, wait_for
from tests.listening import hosted, loop_file, of_type, push_commit


def test_a_push_to_a_polled_bare_repository_starts_each_watching_loop(tmp_path: Path) -> None:
    origin, work, loop_repo = hosted(tmp_path)
    agent = json.dumps([sys.executable, "-I", "-S", "-c", "pass"])
    config = (
        f'[agents.quick]\nadapter = "command"\ncommand = {agent}\n\n'
        f'[remotes.up]\nkind = "gitea"\nrepository = "team/app"\nclone_url = "file://{origin}"\n'
    )
    loops = {
        "one": loop_file(loop_repo, "up", extra='poll = "1s"\n'),
        "two": loop_file(loop_repo, "up", extra='poll = "1s"\n'),
    }
    home = make_home(tmp_path / "home", config, loops)
    proc = start_daemon(home)
    try:
        # The first poll fetches what is there and starts nothing.
        first = git(work, "rev-parse", "HEAD")
        wait_for(
            lambda: git(loop_repo, "for-each-ref", "refs/remotes/up/main") != "",
            what="the first poll's fetch",
        )
        assert git(loop_repo, "rev-parse", "refs/remotes/up/main") == first
        before, after = push_commit(work, "pushed, no webhook")
        made = wait_for(
            lambda: (
                [r for r in runs(home) if r["trigger"].get("new") == after]
                if len([r for r in runs(home) if r["trigger"].get("new") == after]) == 2
                else None
            ),
            what="a run of each loop",
        )
        assert sorted(r["loop"] for r in made) == ["one", "two"]
        for run in made:
            assert run["trigger"]["kind"] == "push"
            assert run["trigger"]["remote"] == "up"
            assert run["trigger"]["old"] == before
        assert git(loop_repo, "rev-parse", "refs/remotes/up/main") == after
        assert not of_type(home, "remote_poll_failed")
    finally:
        stop_daemon(proc)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _poller(tmp_path: Path, clone_url: str, polls: dict[str, str]) -> tuple[RemotePoller, list]:
    daemon = DaemonConfig.model_validate(
        {"remotes": {"up": {"kind": "github", "repository": "a/b", "clone_url": clone_url}}}
    )
    loops = {
        name: Loop(
            name,
            tmp_path / f"{name}.toml",
            LoopConfig(
                repo=str(tmp_path),
                task="t",
                hosted="up",
                on_remote_push=["main"],
                poll=poll,
            ),
        )
        for name, poll in polls.items()
    }
    recorded: list = []
    store = StateStore(tmp_path / "state")
    feed = RemoteFeed(
        store,
        loops=lambda: loops,
        remotes=lambda: daemon.remotes,
        clock=lambda: datetime(2026, 12, 2, tzinfo=UTC),
        event=lambda type_, **fields: recorded.append((type_, fields)),
    )
    return RemotePoller(feed, tmp_path, FakeClock()), recorded


def test_one_poll_per_remote_at_its_loops_shortest_interval(tmp_path: Path) -> None:
    poller, _ = _poller(tmp_path, "file:///nowhere", {"a": "60s", "b": "30s", "c": "0s"})
    assert poller.intervals() == {"up": 30.0}


def test_a_failing_remote_backs_off_doubling_then_recovers(tmp_path: Path) -> None:
    missing = tmp_path / "missing.git"
    poller, recorded = _poller(tmp_path, f"file://{missing}", {"a": "10s"})
    clock = poller.monotonic
    waits = []
    for _ in range(3):
        poller.poll_due()
        waits.append(poller.next_at["up"] - clock.now)  # type: ignore[attr-defined]
        poller.poll_due()  # not due yet: no second ls-remote
        clock.now = poller.next_at["up"]  # type: ignore[attr-defined]
    assert waits == [20.0, 40.0, 80.0]
    failed = [f for t, f in recorded if t == "remote_poll_failed"]
    assert len(failed) == 3 and "missing.git" in failed[0]["error"]
    git(tmp_path, "init", "-q", "--bare", str(missing))
    poller.poll_due()
    assert ("remote_poll_recovered", {"remote": "up"}) in recorded
    assert poller.next_at["up"] - clock.now == 10.0  # type: ignore[attr-defined]


def test_a_listen_change_waits_for_a_restart() -> None:
    from daemon.service.reload import keep_running, restart_pending

    off = DaemonConfig()
    on = DaemonConfig.model_validate({"listen": {"bind": "127.0.0.1:9000"}})
    assert restart_pending(off, on) == {
        "listen": [
            "table",
            "bind",
            "max_body",
            "rate_limit",
            "trusted_proxies",
            "read_timeout",
            "ui",
            "worker_bind",
        ]  # fmt: skip
    }
    assert restart_pending(on, on) == {}
    assert keep_running(off, on).listen is None


def test_check_warns_of_remotes_no_webhook_can_reach(tmp_path: Path) -> None:
    from tests.helpers import loopd

    origin, _, loop_repo = hosted(tmp_path)
    agent = json.dumps([sys.executable, "-c", "pass"])
    remote = (
        f'[agents.quick]\nadapter = "command"\ncommand = {agent}\n\n'
        f'[remotes.up]\nkind = "github"\nrepository = "a/b"\nclone_url = "file://{origin}"\n'
    )
    loops = {"one": loop_file(loop_repo, "up")}
    home = make_home(tmp_path / "home", remote, loops)
    out = loopd(home, "check").stdout + loopd(home, "check").stderr
    assert "remotes.up: loop(s) one follow its pushes, but loopd.toml has no [listen]" in out
    secret = remote + 'secret_env = "LOOPD_TEST_UNSET_SECRET"\n\n[listen]\n'
    (home / "loopd.toml").write_text(secret)
    proc = loopd(home, "check", env={"LOOPD_TEST_UNSET_SECRET": ""})
    assert "the variable LOOPD_TEST_UNSET_SECRET is not set" in proc.stdout + proc.stderr
    proc = loopd(home, "check", env={"LOOPD_TEST_UNSET_SECRET": "s3cret"})
    assert "remotes.up" not in proc.stdout + proc.stderr


def test_a_push_a_webhook_already_fetched_is_not_polled_into_a_second_run(tmp_path: Path) -> None:
    origin, work, loop_repo = hosted(tmp_path)
    daemon = DaemonConfig.model_validate(
        {"remotes": {"up": {"kind": "gitea", "repository": "a/b", "clone_url": f"file://{origin}"}}}
    )
    config = LoopConfig(
        repo=str(loop_repo), task="t", hosted="up", on_remote_push=["main"], poll="10s"
    )
    loops = {"one": Loop("one", tmp_path / "one.toml", config)}
    feed = RemoteFeed(
        StateStore(tmp_path / "state"),
        loops=lambda: loops,
        remotes=lambda: daemon.remotes,
        clock=lambda: datetime(2026, 12, 2, tzinfo=UTC),
        event=lambda *a, **k: None,
    )
    submitted: list = []
    feed.submit = submitted.append  # type: ignore[method-assign]
    poller = RemotePoller(feed, tmp_path, FakeClock())
    assert poller.poll("up")
    assert [p.trigger for p in submitted] == [False]  # first sight: fetched, no run
    _, after = push_commit(work, "taken by a webhook")
    git(loop_repo, "fetch", "-q", str(origin), "+refs/heads/main:refs/remotes/up/main")
    assert poller.poll("up")
    assert len(submitted) == 1  # the webhook's fetch is there already
    _, newer = push_commit(work, "seen by the poll only")
    assert poller.poll("up")
    assert [(p.before, p.after, p.trigger) for p in submitted[1:]] == [(after, newer, True)]


def test_check_warns_that_the_temporal_engine_serves_no_listener(tmp_path: Path) -> None:
    from daemon.home import Home
    from daemon.service.preflight import preflight_warnings

    home = make_home(tmp_path / "home", '[listen]\n\n[engine]\nkind = "temporal"\n')
    loaded = Home(home).load()
    warnings = preflight_warnings(loaded, home / "loopd.toml")
    assert any("served by the local engine's daemon" in w for w in warnings)
