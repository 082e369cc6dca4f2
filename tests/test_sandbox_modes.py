"""`[sandbox] mode` as a user meets it: `loopd check`, `loopd status`, a run's events, a run
refused where bubblewrap cannot run (a stand-in `bwrap` on PATH that fails as it does in a
container without user namespaces), and the git folders a run exposes."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from daemon.runparts.confinement import common_git_dir, run_exposure
from tests.helpers import events, git, loopd, make_repo, start_daemon, stop_daemon, wait_for
from tests.sandboxing import FIX, hostile_home, require_bwrap

BROKEN_BWRAP = (
    "#!/bin/sh\necho 'bwrap: Creating new namespace failed: Operation not permitted' >&2\nexit 1\n"
)


def broken_path(tmp_path: Path) -> str:
    """A PATH whose `bwrap` fails to make its namespaces."""
    folder = tmp_path / "broken-bin"
    folder.mkdir()
    (folder / "bwrap").write_text(BROKEN_BWRAP)
    (folder / "bwrap").chmod(0o755)
    return f"{folder}:{os.environ['PATH']}"


def test_check_and_status_say_which_sandbox_is_in_force(tmp_path: Path, daemons: list) -> None:
    require_bwrap()
    home, _repo = hostile_home(tmp_path, FIX)
    proc = loopd(home, "check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sandbox: bwrap (auto, bubblewrap " in proc.stdout
    data = json.loads(loopd(home, "check", "--json").stdout)
    assert data["sandbox"]["in_force"] == "bwrap" and data["sandbox"]["mode"] == "auto"
    status = loopd(home, "status")
    assert "sandbox: bwrap (auto, bubblewrap " in status.stdout
    daemon = start_daemon(home)
    daemons.append(daemon)
    shown = json.loads(loopd(home, "status", "--json").stdout)
    assert shown["daemon"]["running"] and shown["daemon"]["sandbox"].startswith("sandbox: bwrap")
    on_file = tomllib.loads((home / "state" / "status.toml").read_text())
    assert on_file["daemon"]["sandbox"].startswith("sandbox: bwrap (auto")
    assert stop_daemon(daemon) == 0


@pytest.mark.parametrize("mode", ["auto", "bwrap"])
def test_without_bubblewrap_a_run_is_refused_or_warned_about(mode: str, tmp_path: Path) -> None:
    home, repo = hostile_home(
        tmp_path, "open('ran', 'w').write('ran')\n" + FIX, config=f'[sandbox]\nmode = "{mode}"\n'
    )
    env = {"PATH": broken_path(tmp_path)}
    check = loopd(home, "check", env=env)
    assert check.returncode == 0, check.stdout + check.stderr  # a warning, not an error
    refused = mode == "bwrap" or os.geteuid() == 0
    proc = loopd(home, "once", "calc", env=env, timeout=120)
    run_id = proc.stdout.splitlines()[0]
    run = tomllib.loads((home / "state" / "runs" / run_id / "run.toml").read_text())
    (sandbox,) = [e for e in events(home) if e["type"] == "sandbox"]
    status = loopd(home, "status", env=env).stdout
    if refused:
        assert "warning: sandbox: none; runs are refused" in check.stdout
        assert "Creating new namespace failed" in check.stdout
        assert "sandbox: none; runs are refused" in status
        assert proc.returncode == 1
        assert run["outcome"] == "error" and run["cause"] == "sandbox-unavailable"
        assert "bubblewrap cannot run here" in run["reason"]
        assert run["attempts"] == []  # no agent ever started
        escalation = (home / "state" / "escalations" / f"{run_id}.md").read_text()
        assert "No agent was started" in escalation and "apt-get install bubblewrap" in escalation
    else:  # auto, as an unprivileged user: unconfined, and loud about it
        assert "warning: sandbox: off: bubblewrap cannot run here" in check.stdout
        assert "sandbox: off: bubblewrap cannot run here" in status
        assert sandbox["in_force"] == "off" and "unconfined" in sandbox["warning"]
        assert run["outcome"] == "succeeded"
        assert git(repo, "show", f"{run['branch']}:ran") == "ran"


def test_mode_off_runs_unconfined_without_a_warning(tmp_path: Path) -> None:
    home, repo = hostile_home(
        tmp_path,
        f"open({str(tmp_path / 'outside')!r}, 'w').write('x')\n" + FIX,
        config='[sandbox]\nmode = "off"\nunconfined_as_root = true\n',
    )
    check = loopd(home, "check")
    assert 'sandbox: off (mode = "off")' in check.stdout and "warning: sandbox" not in check.stdout
    proc = loopd(home, "once", "calc", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (sandbox,) = [e for e in events(home) if e["type"] == "sandbox"]
    assert sandbox["in_force"] == "off" and "warning" not in sandbox
    assert (tmp_path / "outside").exists()  # what no sandbox means


def test_the_user_git_folder_is_found_without_asking_git(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    assert common_git_dir(repo) == (repo / ".git").resolve()
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", str(linked))
    assert common_git_dir(linked) == (repo / ".git").resolve()
    bare = tmp_path / "bare.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
    assert common_git_dir(bare) == bare.resolve()
    assert common_git_dir(tmp_path / "nothing") is None
    assert run_exposure(repo, "worktree").git_writable == [str((repo / ".git").resolve())]
    assert run_exposure(repo, "clone").git_readable == [str((repo / ".git").resolve())]


@pytest.mark.parametrize("isolation", ["clone", "worktree"])
def test_a_run_keeps_what_it_exposed_in_its_record(tmp_path: Path, isolation: str) -> None:
    require_bwrap()
    home, repo = hostile_home(tmp_path, FIX, loop={"isolation": isolation})
    proc = loopd(home, "once", "calc", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    run = tomllib.loads((home / "state" / "runs" / run_id / "run.toml").read_text())
    exposure = run["exposure"]
    # A clone's agent reads the user's objects (its alternates) and writes none of them; a
    # worktree's agent reads the user's git folder and writes only what its commits need.
    common = (repo / ".git").resolve()
    user_git = [str(common)]
    if isolation == "clone":
        assert (exposure["git_writable"], exposure["git_readable"]) == ([], user_git)
    else:
        assert exposure["git_readable"] == user_git
        assert str(common / "objects") in exposure["git_writable"]
        assert str(common) not in exposure["git_writable"]
        assert any(p.startswith(str(common / "worktrees")) for p in exposure["git_writable"])
        assert exposure["read_only"] == [str(common / "objects" / "info")]
    assert exposure["agent_home"].endswith(f"{run_id}.agent/home")
    wait_for(lambda: not Path(exposure["agent_home"]).exists(), timeout=5)


def test_paths_kept_read_only_stay_so_inside_the_writable_tree(tmp_path: Path) -> None:
    import subprocess
    from datetime import UTC, datetime

    from daemon.git.tree import prepare_tree
    from daemon.git.userrepo import LedgerWriter
    from daemon.home import Home
    from daemon.runparts.confinement import Confinement
    from daemon.runparts.services import RunServices
    from daemon.runs.executor import new_run
    from daemon.scheduling.queue import PendingRun
    from daemon.state.ledger import ledger_of
    from daemon.state.records import Trigger

    require_bwrap()
    home_path, repo = hostile_home(tmp_path, FIX)
    home = Home(home_path)
    loaded = home.load()
    services = RunServices(home=home, config=loaded.daemon, store=home.state())
    now = datetime.now(UTC)
    trigger = Trigger(loop="calc", kind="manual", ts=now)
    pending = PendingRun(
        id=services.store.new_run_id("calc", now), loop="calc", trigger=trigger, queued_at=now
    )
    loop = loaded.loops["calc"]
    run = new_run(services, loop, pending)
    writer = LedgerWriter(ledger_of(services.store.root), services.clock, run.id)
    tree = prepare_tree(repo, "calc", run.id, "worktree", "HEAD", tmp_path / "worktrees", writer)
    tree = tree.path
    (tree / ".venv").mkdir()
    Confinement.for_run(services, loop.config, run, tree).keep_read_only([tree / ".venv"])
    # The next attempt's confinement, built afresh, keeps it from the run's record.
    confinement = Confinement.for_run(services, loop.config, run, tree)
    launch = confinement.launch_check(
        "touch .venv/replaced 2>&1; touch made && echo tree-writable", confinement.checks_env()
    )
    proc = subprocess.run(
        launch.argv, env=launch.env, pass_fds=launch.pass_fds, capture_output=True, text=True
    )
    launch.close()
    assert "Read-only file system" in proc.stdout and "tree-writable" in proc.stdout
    assert not (tree / ".venv" / "replaced").exists() and (tree / "made").exists()


def test_check_warns_about_sandbox_paths_inside_the_home(tmp_path: Path) -> None:
    home, _repo = hostile_home(tmp_path, FIX)
    config = (home / "loopd.toml").read_text()
    config = config.replace(
        "[limits]", f'[sandbox]\nwritable = ["{home}/state"]\nreadable = ["/usr"]\n\n[limits]'
    )
    (home / "loopd.toml").write_text(config)
    proc = loopd(home, "check")
    assert proc.returncode == 0
    assert f"[sandbox] writable: {home}/state is inside the home" in proc.stdout
    assert "readable" not in proc.stdout.split("inside the home")[-1]


def test_worktrees_inside_the_home_are_named_by_check_and_refused_by_a_run(
    tmp_path: Path,
) -> None:
    require_bwrap()
    home, _repo = hostile_home(tmp_path, FIX)
    inside = home / "trees"
    config = (home / "loopd.toml").read_text()
    config = config.replace(f'worktrees = "{tmp_path / "worktrees"}"', f'worktrees = "{inside}"')
    (home / "loopd.toml").write_text(config)
    check = loopd(home, "check")
    assert f"[limits] worktrees: {inside} is inside the home" in check.stdout, check.stdout
    proc = loopd(home, "once", "calc", timeout=120)
    assert proc.returncode == 1
    run_id = proc.stdout.splitlines()[0]
    run = tomllib.loads((home / "state" / "runs" / run_id / "run.toml").read_text())
    assert run["outcome"] == "error" and run["cause"] == "sandbox-unavailable"
    assert "[limits] worktrees" in run["reason"]


def test_env_keys_and_sandbox_paths_are_checked_with_file_key_and_fix(tmp_path: Path) -> None:
    home, _repo = hostile_home(tmp_path, FIX, loop={"env": {"HOME": "/x"}, "checks_env": ["A-B"]})
    config = (home / "loopd.toml").read_text()
    config = config.replace("[limits]", '[sandbox]\nwritable = ["relative/path"]\n\n[limits]')
    (home / "loopd.toml").write_text(config)
    proc = loopd(home, "check")
    assert proc.returncode == 2
    assert "loopd.toml: sandbox.writable" in proc.stdout
    assert "'relative/path' is not a path from / or ~" in proc.stdout
    config = config.replace('writable = ["relative/path"]', "")
    (home / "loopd.toml").write_text(config)
    proc = loopd(home, "check")
    assert proc.returncode == 2
    assert "calc.toml: env" in proc.stdout and "HOME is set by loopd" in proc.stdout
    assert "'A-B' is not an environment variable name" in proc.stdout
