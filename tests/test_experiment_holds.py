"""`loopd experiment` heeds what holds the daemon's runs: its runs count toward token budgets
(a spent budget starts no more of them) and wait for their agent profile's usage limit.

The budget: `loopd experiment` as a real process with a stand-in `qwen` that prints Qwen Code's
recorded stream (2542 tokens a run). The usage limit: the runner in process with an injected
clock, real runs of a `command` agent, the hold in state/quota.toml as a park leaves it.
"""

from __future__ import annotations

import json
import sys
import threading
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from daemon.experiments import runner as runner_module
from daemon.experiments.arms import arms_for, parse_supports
from daemon.experiments.runner import Experiment, ExperimentRunner
from daemon.home import Home
from daemon.runparts.services import RunServices
from daemon.state.holds import QuotaHold, hold_profile
from tests.helpers import git, loopd, make_home, make_repo, wait_for
from tests.test_budget import fake_qwen, priced_home

NOW = datetime(2026, 11, 30, 23, 30, tzinfo=UTC)
BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5\n",
}
FIXER = "import pathlib; pathlib.Path('calc.py').write_text('def add(a, b):\\n    return a + b\\n')"


def run_records(home: Path) -> list[dict[str, Any]]:
    return [tomllib.loads(p.read_text()) for p in (home / "state" / "runs").glob("*/run.toml")]


def test_an_experiments_runs_spend_the_budget_and_a_spent_budget_starts_no_more(
    tmp_path: Path,
) -> None:
    home = priced_home(tmp_path, daily_tokens=100)
    assert "max_concurrent_runs" not in (home / "loopd.toml").read_text()  # 1: one at a time
    env = fake_qwen(tmp_path)
    proc = loopd(home, "experiment", "calc", "--without", "rules", "--repeat", "3", env=env,
                 timeout=180)  # fmt: skip
    # The first run spent 2542 tokens of the loop's 100: no other run of the six started.
    assert proc.returncode == 1, proc.stdout + proc.stderr
    said = "daily_tokens: 2542 of 100 tokens spent today; new runs of calc wait until"
    assert f"experiment stopped early: {said}" in proc.stderr
    (record,) = run_records(home)
    assert record["trigger"]["kind"] == "experiment" and record["tokens"] == 2542
    experiment_id = proc.stdout.splitlines()[0]
    report = json.loads(
        (home / "state" / "experiments" / experiment_id / "report.json").read_text()
    )
    assert said in report["stopped"]
    assert [(a["arm"], a["runs"]) for a in report["arms"]] == [("all", 1), ("no-rules", 0)]
    # Asked again the same day: nothing starts, and no experiment is made.
    again = loopd(home, "experiment", "calc", "--without", "rules", "--repeat", "1", env=env)
    assert again.returncode == 1
    assert "not run: daily_tokens: 2542 of 100 tokens spent today" in again.stdout
    assert [p.name for p in (home / "state" / "experiments").iterdir()] == [experiment_id]
    assert len(run_records(home)) == 1


class Clock:
    """The runs' wall clock, moved by the test."""

    def __init__(self) -> None:
        self.now = NOW
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self.now

    def set(self, now: datetime) -> None:
        with self._lock:
            self.now = now


def held_experiment(tmp_path: Path, resume_at: datetime) -> tuple[ExperimentRunner, Clock, list]:
    """An experiment of two arms, one run each, whose agent profile is held until `resume_at`."""
    repo = make_repo(tmp_path / "repo", BUGGY)
    argv = [sys.executable, "-c", FIXER]
    config = (
        f'[agents.a]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'
        f'[limits]\nmax_concurrent_runs = 2\nworktrees = "{tmp_path / "worktrees"}"\n'
    )
    loop = (
        f'repo = "{repo}"\ntask = "Make check.py pass."\nagent = "a"\n'
        'done_when = ["python3 check.py"]\nmax_nudges = 0\nmax_attempts = 1\ncritic = "off"\n'
    )
    home = Home(make_home(tmp_path / "home", config, {"calc": loop}))
    loaded = home.load()
    assert not loaded.errors, loaded.errors
    clock = Clock()
    services = RunServices(home=home, config=loaded.daemon, store=home.state(), clock=clock)
    # As a park leaves it: the profile's new runs wait until its limit resets.
    hold = QuotaHold(resume_at=resume_at, since=NOW, run="earlier", loop="calc", message="limit")
    hold_profile(services.store, "a", hold)
    commit = git(repo, "rev-parse", "HEAD")
    experiment = Experiment(loaded.loops["calc"], commit, arms_for(parse_supports("rules")), 1, 2)
    told: list = []
    return ExperimentRunner(services, experiment, on_hold=told.append), clock, told


def test_an_experiments_runs_wait_for_their_profiles_usage_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner_module, "POLL", 0.05)
    resume_at = NOW + timedelta(hours=1)
    runner, clock, told = held_experiment(tmp_path, resume_at)
    reports: list = []
    thread = threading.Thread(target=lambda: reports.append(runner.run()), daemon=True)
    thread.start()
    wait_for(lambda: len(told) == 2, what="both runs to wait for the limit")
    assert all(h.kind == "quota" and h.until == resume_at for h in told)
    assert "usage limit of agent profile 'a'" in told[0].why
    assert run_records(runner.services.home.root) == []  # nothing started while it holds
    clock.set(resume_at + timedelta(seconds=1))
    thread.join(timeout=120)
    assert not thread.is_alive()
    (report,) = reports
    assert report.stopped == ""
    assert [(a.arm, a.runs, a.succeeded) for a in report.arms] == [
        ("all", 1, 1),
        ("no-rules", 1, 1),
    ]
    records = run_records(runner.services.home.root)
    assert len(records) == 2 and all(r["started"] > resume_at for r in records)


def test_a_usage_limit_further_off_than_max_wait_ends_the_experiment(tmp_path: Path) -> None:
    resume_at = NOW + timedelta(days=2)  # [limits] max_wait is 12h
    runner, _, told = held_experiment(tmp_path, resume_at)
    report = runner.run()
    assert report.stopped.startswith("the usage limit of agent profile 'a' lifts at 2026-12-02")
    assert report.stopped.endswith("more than [limits] max_wait (12h) away")
    assert told == [] and [a.runs for a in report.arms] == [0, 0]
    assert run_records(runner.services.home.root) == []
