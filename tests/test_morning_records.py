"""Records that name only what exists: a deleted branch is offered nowhere."""

from __future__ import annotations

import json
import shutil
import tomllib
from datetime import UTC, datetime
from pathlib import Path

from daemon.state.records import RunRecord, RunTrigger, Trigger
from daemon.state.store import StateStore
from tests.helpers import (
    events,
    git,
    loopd,
    make_home,
    make_repo,
    runs,
    start_daemon,
    wait_for,
)
from tests.test_spine import BUGGY, FIXER, agent_config, loop_file

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
    assert "branch" not in text.split("## Last runs")[1].split("##")[0]  # both were deleted


def test_a_branch_merged_by_hand_is_landed_everywhere(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home", agent_config(FIXER), {"calc": loop_file(repo)})
    proc = loopd(home, "once", "calc", "--reason", "test")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    branch = f"loopd/calc/{run_id}"
    assert f"loopd land {run_id}" in proc.stdout  # land = "branch": a person lands it
    ready = json.loads(loopd(home, "report", "--json").stdout)["ready"]
    assert [r["run"] for r in ready] == [run_id] and ready[0]["next"] == f"loopd land {run_id}"
    git(repo, "merge", "-q", "--ff-only", branch)  # the person takes it by hand
    listed = loopd(home, "branches", "--json")
    [row] = json.loads(listed.stdout)["branches"]
    assert row["landed"] is True and row["landing"].startswith("landed on main")
    assert "(by hand)" in row["landing"]
    assert json.loads(loopd(home, "report", "--json").stdout)["ready"] == []
    run = read_run(home, run_id)
    assert run["landed"] is True and run["landed_how"] == "by hand"
    assert run["landed_as"] == git(repo, "rev-parse", "main")
    shown = loopd(home, "show", run_id)
    assert "landed on main" in shown.stdout and "(by hand)" in shown.stdout
    summary = json.loads(loopd(home, "runs", "--json").stdout)[0]
    assert summary["landing"]["state"] == "landed" and summary["landing"]["how"] == "by hand"


def test_loopd_land_lands_a_succeeded_run_after_checking_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home", agent_config(FIXER), {"calc": loop_file(repo)})
    proc = loopd(home, "once", "calc", "--reason", "test")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    before = git(repo, "rev-parse", "main")
    landed = loopd(home, "land", run_id)
    assert landed.returncode == 0, landed.stdout + landed.stderr
    assert git(repo, "rev-parse", "main") == git(repo, "rev-parse", f"loopd/calc/{run_id}")
    assert git(repo, "rev-parse", "main") != before
    run = read_run(home, run_id)
    assert run["landed"] is True and run["landed_how"] == "merge"
    assert "landed on main" in landed.stdout
    again = loopd(home, "land", run_id)
    assert again.returncode == 0 and "landed on main" in again.stdout
    shown = loopd(home, "show", run_id)
    assert "landing: landed on main" in shown.stdout


def test_loopd_land_refuses_a_run_that_did_not_succeed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(
        tmp_path / "home", agent_config(IDLE), {"calc": loop_file(repo, max_attempts=1)}
    )
    proc = loopd(home, "once", "calc", "--reason", "test")
    run_id = proc.stdout.splitlines()[0]
    refused = loopd(home, "land", run_id)
    assert refused.returncode == 1
    assert f"run {run_id} ended escalated" in refused.stderr and "Traceback" not in refused.stderr


def test_a_preparing_run_s_branch_is_not_landed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home", agent_config(FIXER), {"calc": loop_file(repo)})
    store = StateStore(home / "state")
    run_id = store.new_run_id("calc", datetime(2026, 12, 1, 23, 0, tzinfo=UTC))
    base = git(repo, "rev-parse", "main")
    git(repo, "branch", f"loopd/calc/{run_id}", base)
    trigger = RunTrigger(kind="manual", reason="test")
    record = RunRecord(id=run_id, loop="calc", task="t", trigger=trigger,
                       started=datetime(2026, 12, 1, 23, 0, tzinfo=UTC), phase="preparing",
                       branch=f"loopd/calc/{run_id}", repo=str(repo), base_commit=base,
                       target="main", land="merge")  # fmt: skip
    store.save_run(record)
    [row] = json.loads(loopd(home, "branches", "--json").stdout)["branches"]
    assert row["landed"] is False and row["outcome"] == "(preparing)"


SILENT = "import time; time.sleep(120)"
TOUCH_PROTECTED = "import pathlib; pathlib.Path('check.py').write_text('raise SystemExit(1)\\n')"


def test_an_agent_stopped_for_silence_heads_its_escalation(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    loop = loop_file(repo, max_attempts=1, max_nudges=1).replace('"30s"', '"1s"')
    home = make_home(tmp_path / "home", agent_config(SILENT), {"calc": loop})
    proc = loopd(home, "once", "calc", "--reason", "test", timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    run = read_run(home, run_id)
    assert run["cause"] == "stalled"
    assert "stopped 2 times for silence (no output and no file change for" in run["reason"]
    assert "after 1 attempt" in run["reason"] and "1 attempts" not in run["reason"]
    escalation = (home / "state" / "escalations" / f"{run_id}.md").read_text()
    assert "stopped 2 times for silence" in escalation.split("## Task")[0]
    logs = loopd(home, "logs", run_id).stdout
    assert "stall (silence): no output and no file change for" in logs


def test_a_protected_path_heads_an_escalation_whose_checks_fail(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    loop = loop_file(repo, max_attempts=1, max_nudges=0, protect=["check.py"])
    home = make_home(tmp_path / "home", agent_config(TOUCH_PROTECTED), {"calc": loop})
    proc = loopd(home, "once", "calc", "--reason", "test")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run = read_run(home, proc.stdout.splitlines()[0])
    assert run["cause"] == "protect-violation"
    assert run["reason"].startswith("attempts used up; protected path changed: check.py")


def test_a_repository_deleted_after_loading_ends_the_run_with_what_to_do(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home", agent_config(FIXER), {"calc": loop_file(repo)})
    daemons.append(start_daemon(home))
    shutil.rmtree(repo)
    at = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)
    StateStore(home / "state").put_trigger(Trigger(loop="calc", kind="manual", ts=at))
    wait_for(lambda: any(r.get("outcome") for r in runs(home)), what="the run's end")
    [run] = runs(home)
    assert run["outcome"] == "error" and run["cause"] == "setup-failed"
    assert "PosixPath" not in run["reason"] and "FileNotFoundError" not in run["reason"]
    assert f"the repository {repo} that `repo` in" in run["reason"]
    assert "calc.toml" in run["reason"] and "loopd check" in run["reason"]
    escalation = home / "state" / "escalations" / f"{run['id']}.md"
    wait_for(escalation.exists, what="the escalation")
    text = escalation.read_text()
    assert "PosixPath" not in text and "loopd could not make the run's tree" in text


def test_an_unexpected_missing_file_is_said_without_a_repr() -> None:
    from daemon.runparts.decisions import failed

    ending = failed(FileNotFoundError(2, "No such file or directory", Path("/gone/x")))
    assert ending.cause == "loopd-error" and "PosixPath" not in ending.reason
    assert ending.reason.startswith("No such file or directory: /gone/x: a file or folder")


def test_an_interrupted_attempt_finished_when_it_died_not_at_the_restart(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    loop = loop_file(repo).replace('"30s"', '"0s"')  # no silence stall while it waits
    home = make_home(tmp_path / "home", agent_config(SILENT), {"calc": loop})
    first = start_daemon(home)
    daemons.append(first)
    at = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)
    StateStore(home / "state").put_trigger(Trigger(loop="calc", kind="manual", ts=at))
    wait_for(lambda: runs(home) and runs(home)[0].get("phase") == "running", what="the attempt")
    first.kill()  # loopd dies mid-attempt
    first.wait()
    daemons.append(start_daemon(home))
    wait_for(lambda: runs(home)[0].get("outcome"), what="the interrupted run's end")
    run = runs(home)[0]
    assert run["outcome"] == "interrupted"
    [attempt] = run["attempts"]
    restarted = [e for e in events(home) if e["type"] == "daemon_started"][-1]
    died = attempt["finished"]
    assert attempt["interrupted"] is True
    assert died < datetime.fromisoformat(restarted["ts"]), (died, restarted["ts"])
    assert [s["at"] for s in attempt["stalls"] if s["kind"] == "interrupted"] == [died]


def test_a_check_whose_program_is_missing_heads_the_escalation(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    loop = loop_file(repo, max_attempts=1, max_nudges=0).replace("python3 check.py", "pytestt -q")
    home = make_home(tmp_path / "home", agent_config(FIXER), {"calc": loop})
    proc = loopd(home, "once", "calc", "--reason", "test", "--force")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run = read_run(home, proc.stdout.splitlines()[0])
    assert run["attempts"][0]["checks_missing"] == ["pytestt -q"]
    assert run["cause"] == "checks-failed"
    assert "the check `pytestt -q` exited 127 or 126: a program it runs is missing" in run["reason"]


def test_loopd_land_verifies_the_commit_it_lands(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(tmp_path / "home", agent_config(FIXER), {"calc": loop_file(repo)})
    proc = loopd(home, "once", "calc", "--reason", "test")
    run_id = proc.stdout.splitlines()[0]
    branch = f"loopd/calc/{run_id}"
    main_before = git(repo, "rev-parse", "main")
    # The branch moves by hand to a commit whose checks fail: nothing lands.
    git(repo, "checkout", "-q", branch)
    (repo / "calc.py").write_text("def add(a, b):\n    return a * b\n")
    git(repo, "commit", "-qam", "broken after the checks")
    git(repo, "checkout", "-q", "main")
    refused = loopd(home, "land", run_id)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "not landed" in refused.stderr and "checks fail" in refused.stderr
    assert git(repo, "rev-parse", "main") == main_before
    assert f"loopd land {run_id}" in loopd(home, "show", run_id).stdout
    git(repo, "branch", "-f", branch, f"{branch}~1")
    landed = loopd(home, "land", run_id)
    assert landed.returncode == 0, landed.stdout + landed.stderr
    run = read_run(home, run_id)
    assert run["landed"] is True and run["cause"] == "passed"
    assert git(repo, "rev-parse", "main") == run["landed_as"]


def test_the_landing_state_says_how_a_pushed_run_landed() -> None:
    from daemon.people.landstate import landing_state

    at = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)
    run = RunRecord(id="r", loop="l", task="t", trigger=RunTrigger(kind="manual"), started=at,
                    outcome="succeeded", branch="loopd/l/r", target="main", land="push",
                    landed=True, landed_as="abcdef1234567", landed_how="push")  # fmt: skip
    assert landing_state(run).line() == (
        "landed as branch loopd/l/r pushed for main at abcdef123456 (push)"
    )
    run.landed, run.landing = False, "git push to origin failed: denied"
    state = landing_state(run)
    assert state.state == "blocked" and state.run == "loopd land r"
