"""Tests that kill mutants a manual sample found alive outside bench/mutation.py's modules:
when `done_when` runs first, the wedge check's `setup_timeout`, `protect` at landing."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from daemon.config import LoopConfig
from daemon.git.userrepo import UserRepo
from daemon.home import Home
from daemon.landing.guard import blocked_paths
from daemon.runparts.services import RunServices
from daemon.runparts.setup import checks_done_first
from daemon.runs.executor import WEDGE_MARGIN, RunExecutor
from daemon.state.records import RunRecord, RunTrigger
from daemon.state.store import StateStore
from tests.helpers import git, make_home, make_repo

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def loop(**fields: object) -> LoopConfig:
    return LoopConfig(repo="/tmp", task="t", **fields)  # type: ignore[arg-type]


def run(kind: str = "manual", force: bool = False) -> RunRecord:
    trigger = RunTrigger(kind=kind, ts=NOW, force=force)  # type: ignore[arg-type]
    return RunRecord(id="20261130T000000Z-l-0000", loop="l", task="t", trigger=trigger, started=NOW)


def test_done_when_runs_first_except_for_retries_forced_runs_and_experiments() -> None:
    checked = loop(done_when=["python3 check.py"])
    assert checks_done_first(checked, run("manual"))
    assert checks_done_first(checked, run("schedule"))
    # A retry continues work that was not done: asking again would skip it.
    assert not checks_done_first(checked, run("retry"))
    assert not checks_done_first(checked, run("manual", force=True))
    assert not checks_done_first(checked, run("experiment"))
    # Nothing to run, or the loop turned it off.
    assert not checks_done_first(loop(), run("manual"))
    assert not checks_done_first(loop(done_when=["true"], skip_if_done=False), run("manual"))


def executor(tmp_path: Path, extra: str) -> RunExecutor:
    """A run's executor for a loop whose attempt may take 60 s, with `extra` keys."""
    repo = make_repo(tmp_path / "repo")
    root = make_home(
        tmp_path / "home",
        '[agents.a]\nadapter = "command"\ncommand = ["true"]\n',
        {
            "l": f'repo = "{repo}"\ntask = "t"\nagent = "a"\nattempt_timeout = "60s"\n'
            f'stall_after = "20s"\ncheck_timeout = "30s"\n{extra}'
        },
    )
    home = Home(root)
    loaded = home.load()
    services = RunServices(
        home=home, config=loaded.daemon, store=StateStore(home.state_dir), clock=lambda: NOW
    )
    return RunExecutor(services, loaded.loops["l"], run())


def test_a_run_in_a_long_setup_is_judged_against_setup_timeout(tmp_path: Path) -> None:
    slow = executor(tmp_path / "setup", 'setup = ["make deps"]\nsetup_timeout = "30m"\n')
    now = time.monotonic()
    slow.progress_at = now
    # Past the attempt's 60 s but within setup's 30 min: setup may still be working.
    assert not slow.wedged(now + 60 + WEDGE_MARGIN + 1)
    assert not slow.wedged(now + 1800 + WEDGE_MARGIN - 5)
    assert slow.wedged(now + 1800 + WEDGE_MARGIN + 1)


def test_setup_timeout_counts_only_when_the_loop_has_setup(tmp_path: Path) -> None:
    bare = executor(tmp_path / "bare", 'setup_timeout = "30m"\n')
    now = time.monotonic()
    bare.progress_at = now
    assert bare.wedged(now + 60 + WEDGE_MARGIN + 1)


def landing_case(tmp_path: Path, **fields: object) -> tuple[UserRepo, str, LoopConfig]:
    """A repository whose run branch changed `src/app.py`, `secrets/prod.env` and added a
    link `notes` to `secrets/`; the commit the run started from."""
    repo = make_repo(tmp_path / "repo", {"src/app.py": "x = 1\n", "secrets/prod.env": "A=1\n"})
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "run")
    (repo / "src" / "app.py").write_text("x = 2\n")
    (repo / "secrets" / "prod.env").write_text("A=2\n")
    (repo / "notes").symlink_to("secrets")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "run's work")
    cfg = LoopConfig(repo=str(repo), task="t", **fields)  # type: ignore[arg-type]
    return UserRepo.locate(repo), base, cfg


def test_protected_paths_and_links_into_them_block_landing(tmp_path: Path) -> None:
    user, base, cfg = landing_case(tmp_path / "protected", protect=["secrets/**"])
    found = blocked_paths(user, base, "run", cfg)
    assert "secrets/prod.env" in found
    assert any(p.startswith("notes (") and "secrets" in p for p in found), found
    assert not any(p.startswith("src/") for p in found)


def test_without_protect_the_same_change_lands(tmp_path: Path) -> None:
    user, base, cfg = landing_case(tmp_path / "open")
    assert blocked_paths(user, base, "run", cfg) == []
