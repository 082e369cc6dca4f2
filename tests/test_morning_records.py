"""Records that name only what exists: a deleted branch is offered nowhere."""

from __future__ import annotations

import tomllib
from pathlib import Path

from tests.helpers import git, loopd, make_home, make_repo
from tests.test_spine import BUGGY, agent_config, loop_file

IDLE = "print('nothing to do here')"


def read_run(home: Path, run_id: str) -> dict:
    return tomllib.loads((home / "state" / "runs" / run_id / "run.toml").read_text())


def test_a_run_that_changed_nothing_offers_no_branch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    loop = loop_file(repo, max_attempts=1)
    home = make_home(tmp_path / "home", agent_config(IDLE), {"calc": loop})
    proc = loopd(home, "once", "calc", "--reason", "test")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    name = f"loopd/calc/{run_id}"
    assert git(repo, "branch", "--list", "loopd/*") == ""
    run = read_run(home, run_id)
    assert run["outcome"] == "escalated"
    assert run["branch"] == "" and run["branch_deleted"] == name
    assert name not in proc.stdout
    escalation = (home / "state" / "escalations" / f"{run_id}.md").read_text()
    assert name not in escalation and "git merge" not in escalation
    assert "The agent left no changes." in escalation
    progress = (home / "state" / "progress" / "calc.md").read_text()
    assert name not in progress
