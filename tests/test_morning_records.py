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


def test_a_skip_after_a_hand_fix_clears_the_failing_checks_from_the_progress(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    loop = loop_file(repo, max_attempts=1)
    home = make_home(tmp_path / "home", agent_config(IDLE), {"calc": loop})
    first = loopd(home, "once", "calc", "--reason", "test")
    assert first.returncode == 1, first.stdout + first.stderr
    progress = home / "state" / "progress" / "calc.md"
    assert "add(2, 3) gave -1" in progress.read_text()
    # A person fixes it by hand; the next run finds the checks passing.
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git(repo, "commit", "-qam", "fix by hand")
    second = loopd(home, "once", "calc", "--reason", "test")
    assert second.returncode == 0, second.stdout + second.stderr
    run_id = second.stdout.splitlines()[0]
    assert read_run(home, run_id)["outcome"] == "skipped"
    text = progress.read_text()
    section = text.split("## Checks that still fail")[1].split("##")[0]
    assert "add(2, 3) gave -1" not in text
    assert f"None: run {run_id} found the checks passing already" in section
