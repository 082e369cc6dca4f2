"""After it lands, through a hosted repository: a pushed run's pull request merged there is
followed as soon as loopd sees the push, by its listener's webhook or by its poll.

Real git: a bare 'hosted' repository, the loop's repository pushing to it, a person's clone
that merges the run's branch and pushes. `loopd once` lands the run (`land = "push"`), then
`loopd run` (the local engine, or a Temporal home) serves `[listen]` (uvicorn on 127.0.0.1)
or polls the remote; a second loop, `watch`, follows the hosted repository's `main`. The
aftermath goes from `pending` to `kept` at the push, not at the next 5-minute look.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from daemon.home import Home
from daemon.state.aftermath import AFTERMATH_FILE, Aftermath, load_aftermath
from daemon.state.records import RunRecord
from tests.helpers import git, loopd, make_repo, start_daemon, stop_daemon, wait_for
from tests.listening import SECRET, SECRET_ENV, delivery, listening_port, post, require_module
from tests.test_aftermath import AGENT, person
from tests.test_landing import land_case
from tests.test_run_lifecycle import BUGGY

require_module("uvicorn", "listen")

QUICK = json.dumps([sys.executable, "-I", "-S", "-c", "pass"])


def pushed(tmp_path: Path, listen: bool, watch: str) -> tuple[Home, Path, Path, RunRecord]:
    """A run of `calc` landed by `loopd once` with `land = "push"` on the bare `origin`
    (hosted, `[remotes.origin]`), and loop `watch` on the same repository following the
    hosted `main` (`watch`: its extra keys, `poll` for a poll); (home, repository, hosted
    repository, the run)."""
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(origin))
    repo = make_repo(tmp_path / "repo", BUGGY)
    git(repo, "remote", "add", "origin", str(origin))
    git(repo, "push", "-q", "origin", "main")
    config = (
        f'[agents.quick]\nadapter = "command"\ncommand = {QUICK}\n\n'
        f'[remotes.origin]\nkind = "github"\nrepository = "Codertocat/Hello-World"\n'
        f'clone_url = "file://{origin}"\nsecret_env = "{SECRET_ENV}"\n'
    )
    if listen:
        config += '\n[listen]\nbind = "127.0.0.1:0"\n'
    case = land_case(tmp_path, agent=AGENT, config=config, land="push")
    (case.home.root / "loops" / "watch.toml").write_text(
        f'repo = "{repo}"\ntask = "Follow the hosted repository."\nagent = "quick"\n'
        f'hosted = "origin"\non_remote_push = ["main"]\nmax_attempts = 1\nmax_nudges = 0\n'
        f'critic = "off"\nskip_if_done = false\n{watch}'
    )
    proc = loopd(case.home.root, "once", "calc", timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = next(case.home.state().iter_runs("calc"))
    assert run.landed and run.landed_how == "push", run
    return case.home, repo, origin, run


def merge_on_the_host(tmp_path: Path, origin: Path, run: RunRecord) -> tuple[str, str]:
    """The run's pull request merged on the hosting side by a person: (before, after)."""
    other = tmp_path / "person"
    git(tmp_path, "clone", "-q", "-b", "main", str(origin), str(other))
    before = git(other, "rev-parse", "HEAD")
    person(other, "merge", "-q", "--no-ff", "-m", "Merge pull request #1", f"origin/{run.branch}")
    person(other, "push", "-q", "origin", "main")
    return before, git(other, "rev-parse", "HEAD")


def record_of(home: Home, run: RunRecord) -> Aftermath | None:
    path = home.state_dir / "runs" / run.id
    return load_aftermath(path) if (path / AFTERMATH_FILE).exists() else None


def state_of(home: Home, run: RunRecord) -> str:
    record = record_of(home, run)
    return record.state if record is not None else ""


def changed_to_kept(home: Home, run: RunRecord) -> list[dict[str, Any]]:
    lines = (home.state_dir / "events.jsonl").read_text().splitlines()
    return [
        e
        for e in map(json.loads, lines)
        if e["type"] == "aftermath_changed" and e["run"] == run.id and e["state"] == "kept"
    ]


def followed_at_the_push(
    tmp_path: Path, home: Home, repo: Path, origin: Path, run: RunRecord, deliver: bool
) -> None:
    """The daemon's first look finds the run pending; the merge is pushed on the host (and
    delivered to the listener when `deliver`); the fetch it causes brings the run to kept."""
    wait_for(lambda: state_of(home, run) == "pending", timeout=120, what="the first look")
    before, after = merge_on_the_host(tmp_path, origin, run)
    if deliver:
        port = wait_for(lambda: listening_port(home.root), what="the listener")
        headers, body = delivery("github", "refs/heads/main", before, after)
        status, text = post(port, "/hooks/github", headers, body)
        assert status == 202, text
    wait_for(lambda: state_of(home, run) == "kept", timeout=120, what="the merged run kept")
    assert git(repo, "rev-parse", "refs/remotes/origin/main") == after  # the feed fetched it
    record = record_of(home, run)
    assert record is not None and record.lines_kept == record.lines_landed == 5
    # The record is saved before its event (daemon/aftermath/sweep.py): the event follows.
    wait_for(lambda: changed_to_kept(home, run), what="the aftermath_changed event")
    (changed,) = changed_to_kept(home, run)
    assert changed["was"] == "pending"


def test_a_webhook_delivery_of_the_merge_brings_the_pushed_run_up_to_date(
    tmp_path: Path,
) -> None:
    """The local engine's listener: a signed delivery of the push that merged the run."""
    home, repo, origin, run = pushed(tmp_path, listen=True, watch="")
    proc = start_daemon(home.root, env={SECRET_ENV: SECRET})
    try:
        followed_at_the_push(tmp_path, home, repo, origin, run, deliver=True)
    finally:
        stop_daemon(proc)


def test_a_poll_that_sees_the_merge_brings_the_pushed_run_up_to_date(tmp_path: Path) -> None:
    """No listener: the loop polls the hosted repository every second."""
    home, repo, origin, run = pushed(tmp_path, listen=False, watch='poll = "1s"\n')
    proc = start_daemon(home.root)
    try:
        followed_at_the_push(tmp_path, home, repo, origin, run, deliver=False)
    finally:
        stop_daemon(proc)


@pytest.mark.parametrize("deliver", [True, False], ids=["webhook", "poll"])
def test_the_temporal_home_follows_a_pushed_run_at_the_push_too(
    tmp_path: Path, temporal: Any, deliver: bool
) -> None:
    """`[engine] kind = "temporal"`: the home serves [listen] and the polls
    (engine/temporal/homeoutside.py); its fetch starts the aftermath's look at once, not at
    the housekeeping's next minute."""
    from tests.machines import engine_toml

    server, namespace = temporal
    watch = "" if deliver else 'poll = "1s"\n'
    home, repo, origin, run = pushed(tmp_path, listen=deliver, watch=watch)
    config = home.root / "loopd.toml"
    config.write_text(config.read_text() + "\n" + engine_toml(server.address, namespace))
    proc = start_daemon(home.root, env={SECRET_ENV: SECRET})
    try:
        followed_at_the_push(tmp_path, home, repo, origin, run, deliver=deliver)
    finally:
        stop_daemon(proc)
