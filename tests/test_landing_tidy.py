"""Tidy landings (issue #42): one commit per run by default, `land_commits = "keep"`, a run
whose change the target already holds, `loopd branches` of this home only, and today's `land`
in the texts about a landing.

Real git repositories (the person's checkout, a bare remote), real `command` agents, real
checks in the sandbox; runs through the executor and `loopd land`, `branches`, `show`, `runs`
as subprocesses.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from daemon.people.report import build_report, render_markdown
from tests.helpers import git, loopd
from tests.test_landing import FIXER, land_case, run_once
from tests.test_run_lifecycle import TASK, Case

# The first session only looks (a note, no fix): the checks fail, the agent is nudged, and
# loopd commits the work so far; the second session fixes add().
NUDGED = (
    "import pathlib\n"
    "n = pathlib.Path('notes.txt')\n"
    "if not n.exists():\n"
    "    n.write_text('looked\\n')\n"
    "else:\n"
    "    p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
)


def commits_since(case: Case, base: str, ref: str = "main") -> list[str]:
    return git(case.repo, "log", "--format=%s", f"{base}..{ref}").splitlines()


def set_land(case: Case, land: str) -> None:
    """The loop's file now says `land = LAND` (the person changed it after the run)."""
    path = case.home.root / "loops" / "calc.toml"
    text = re.sub(r"^land = .*$", "", path.read_text(), flags=re.M)
    path.write_text(text + f'land = "{land}"\n')


# -- one commit per run -----------------------------------------------------------------------


def test_a_nudged_run_lands_as_one_commit_with_a_composed_message(tmp_path: Path) -> None:
    case = land_case(tmp_path, NUDGED, land="merge", max_nudges=1)
    base = git(case.repo, "rev-parse", "main")
    run = run_once(case)
    assert run.outcome == "succeeded" and run.landed, (run.reason, run.landing)
    # The branch held the nudge's commit and the final one; main gets one commit.
    subjects = commits_since(case, base)
    assert len(subjects) == 1 and subjects[0].startswith("loopd(calc): Make check.py pass")
    assert subjects[0].endswith(f"(run {run.id})")
    head = git(case.repo, "log", "-1", "--format=%B", "main")
    assert f"(run {run.id})" in head and "loopd(calc):" in head and TASK in head
    assert "Checks that passed:\n- python3 check.py" in head
    assert "work so far" not in git(case.repo, "log", "--format=%B", "main")
    parents = git(case.repo, "rev-list", "--parents", "-n", "1", "main").split()[1:]
    assert parents == [base]
    # The run's branch is what landed; its attempts' tip is kept in the ref ledger.
    assert (
        git(case.repo, "rev-parse", run.branch)
        == run.landed_as
        == git(case.repo, "rev-parse", "main")
    )
    ledger = [
        json.loads(line) for line in (case.store.root / "ref-ledger.jsonl").read_text().splitlines()
    ]
    moved = [e for e in ledger if e["why"] == "landed as one commit"]
    assert moved and moved[-1]["old"] == run.attempts[-1].head_commit
    assert (case.repo / "calc.py").read_text().count("a + b") == 1  # the checkout moved too


def test_land_commits_keep_lands_the_attempts_commits(tmp_path: Path) -> None:
    case = land_case(tmp_path, NUDGED, land="merge", max_nudges=1, land_commits="keep")
    base = git(case.repo, "rev-parse", "main")
    run = run_once(case)
    assert run.outcome == "succeeded" and run.landed, (run.reason, run.landing)
    subjects = commits_since(case, base)
    assert len(subjects) == 2 and "work so far" in subjects[1], subjects
    assert git(case.repo, "rev-parse", "main") == run.attempts[-1].head_commit


def test_a_moved_target_lands_one_commit_on_it_checked_there(tmp_path: Path) -> None:
    case = land_case(tmp_path, NUDGED, land="branch", max_nudges=1)
    run = run_once(case)
    assert run.outcome == "succeeded" and not run.landed
    (case.repo / "NOTES.md").write_text("the person's own work\n")
    git(case.repo, "add", "NOTES.md")
    git(case.repo, "commit", "-q", "-m", "notes")
    moved = git(case.repo, "rev-parse", "main")
    landed = loopd(case.home.root, "land", run.id)
    assert landed.returncode == 0, landed.stderr
    main = git(case.repo, "rev-parse", "main")
    assert git(case.repo, "rev-list", "--parents", "-n", "1", main).split()[1:] == [moved]
    assert commits_since(case, moved) == [git(case.repo, "log", "-1", "--format=%s", main)]
    assert f"(run {run.id})" in commits_since(case, moved)[0]
    assert (case.repo / "NOTES.md").exists() and "a + b" in (case.repo / "calc.py").read_text()
    # The checks ran on the files that landed, in a fresh tree of loopd's own.
    assert "python3 check.py" in (case.store.run_dir(run.id) / "land-checks.log").read_text()
    again = case.store.load_run(run.id)
    assert again.landed and again.landed_as == main and again.landed_how == "merge"


def test_push_pushes_the_run_as_one_commit_and_a_retry_pushes_the_same(tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    case = land_case(tmp_path, NUDGED, land="push", max_nudges=1)
    git(case.repo, "remote", "add", "origin", str(remote))
    base = git(case.repo, "rev-parse", "main")
    run = run_once(case)
    assert run.outcome == "succeeded" and run.landed, (run.reason, run.landing)
    pushed = git(remote, "rev-parse", run.branch)
    assert pushed == run.landed_as == git(case.repo, "rev-parse", run.branch)
    assert git(remote, "rev-list", "--parents", "-n", "1", pushed).split()[1:] == [base]
    assert "Checks that passed" in git(remote, "log", "-1", "--format=%B", pushed)
    # Landing again (the record cleared, as after a failed pr_command) pushes nothing new.
    from daemon.landing.land import land_run
    from daemon.runparts.journal import RunJournal

    run.landed, run.landed_as = False, ""
    land_run(RunJournal(case.services, run), case.loop.config)
    assert run.landed and run.landed_as == pushed == git(remote, "rev-parse", run.branch)
    # The same squash made at another second (same parent, files and message) is not made
    # again: the branch is pushed as it is.
    message = git(case.repo, "cat-file", "commit", pushed).split("\n\n", 1)[1]
    when = "2001-01-01T00:00:00Z"
    env = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
    env |= {
        f"GIT_{who}_{what}": "Test" for who in ("AUTHOR", "COMMITTER") for what in ("NAME", "EMAIL")
    }
    argv = ["git", "commit-tree", f"{pushed}^{{tree}}", "-p", base, "-m", message]
    older = subprocess.run(argv, cwd=case.repo, env=env, capture_output=True, text=True)
    assert older.returncode == 0, older.stderr
    git(case.repo, "branch", "-f", run.branch, older.stdout.strip())
    git(remote, "update-ref", "-d", f"refs/heads/{run.branch}")
    run.landed, run.landed_as = False, ""
    land_run(RunJournal(case.services, run), case.loop.config)
    assert run.landed and run.landed_as == older.stdout.strip() == git(
        remote, "rev-parse", run.branch
    )


# -- the same change twice ---------------------------------------------------------------------


def test_runs_whose_change_already_landed_are_recorded_so_and_never_merged_empty(
    tmp_path: Path,
) -> None:
    case = land_case(tmp_path, FIXER, land="branch", skip_if_done=False)
    first, second, third, fourth = (run_once(case) for _ in range(4))
    assert all(r.outcome == "succeeded" and not r.landed for r in (first, second, third, fourth))
    assert loopd(case.home.root, "land", first.id).returncode == 0
    main = git(case.repo, "rev-parse", "main")
    # `loopd land` on another: no commit, recorded as already landed.
    other = loopd(case.home.root, "land", second.id)
    assert other.returncode == 0, other.stderr
    assert "already landed" in other.stdout and "main already held its change" in other.stdout
    assert git(case.repo, "rev-parse", "main") == main
    record = case.store.load_run(second.id)
    assert record.landed and record.landed_how == "already" and record.landed_as == main
    # The others are found by the read commands: `show` (its quick path hands the run to the
    # full one, which records it), `branches` (all of a repository's runs at once), `runs`.
    shown = loopd(case.home.root, "show", third.id)
    assert "landing: already landed: main already held its change" in shown.stdout
    assert case.store.load_run(third.id).landed_how == "already"
    listed = loopd(case.home.root, "branches")
    line = next(x for x in listed.stdout.splitlines() if fourth.branch in x)
    assert "already landed" in line, listed.stdout
    assert case.store.load_run(fourth.id).landed_as == main
    # git's answer is kept in the run index: the next listing asks git only for what moved.
    kept = json.loads((case.store.root / "runs-index.json").read_text())["held"]
    assert kept[fourth.id] == f"{fourth.base_commit} {fourth.attempts[-1].head_commit} {main} 1"
    runs = json.loads(loopd(case.home.root, "runs", "--json").stdout)
    states = {r["run"]: r["landing"] for r in runs}
    for run in (second, third, fourth):
        assert states[run.id]["how"] == "already" and states[run.id]["state"] == "landed"
    finished = case.store.load_run(fourth.id).finished
    report = render_markdown(build_report(case.store, first.started, finished))  # type: ignore[arg-type]
    ready = report.split("## Ready to land", 1)[1] if "## Ready to land" in report else ""
    assert not {second.branch, third.branch, fourth.branch} & set(ready.split("`"))
    # Never offered again: `loopd land` says so and moves nothing.
    again = loopd(case.home.root, "land", third.id)
    assert again.returncode == 0 and "already landed" in again.stdout
    assert git(case.repo, "rev-parse", "main") == main


def test_a_merge_run_whose_change_landed_meanwhile_is_already_landed(tmp_path: Path) -> None:
    """`land = "merge"`: the target got the same fix (by a person) while the run worked."""
    case = land_case(tmp_path, FIXER, land="merge", skip_if_done=False)
    (case.repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git(case.repo, "commit", "-qam", "the person's fix")
    # The run started from the old base (a `start_point` before the fix): build it there.
    git(case.repo, "branch", "old", "main~1")
    from tests.test_landing import with_loop

    with_loop(case, base="old", target="main")
    run = run_once(case)
    main = git(case.repo, "rev-parse", "main")
    assert run.outcome == "succeeded" and run.landed and run.landed_how == "already", run.landing
    assert run.landed_as == main and git(case.repo, "log", "--format=%s", "-1", "main") == (
        "the person's fix"
    )


# -- `loopd branches`: this home's ------------------------------------------------------------


def test_branches_lists_only_this_homes_runs(tmp_path: Path) -> None:
    case = land_case(tmp_path, FIXER, land="branch", skip_if_done=False)
    mine = run_once(case)
    # Another home whose loop of the same name works on the same repository (as every
    # home's example loop does on ~/.cache/loopd/example).
    other = land_case(
        tmp_path / "other", FIXER, land="branch", skip_if_done=False, repo=str(case.repo)
    )
    theirs = run_once(other)
    assert theirs.branch.startswith("loopd/calc/") and git(case.repo, "rev-parse", theirs.branch)
    listed = loopd(case.home.root, "branches")
    assert listed.returncode == 0, listed.stderr
    assert mine.branch in listed.stdout and theirs.branch not in listed.stdout
    assert "(no record)" not in listed.stdout
    assert "1 run branch of another home or of a run unknown here not listed" in listed.stdout
    rows = json.loads(loopd(case.home.root, "branches", "--json").stdout)["branches"]
    assert [row["run"] for row in rows] == [mine.id]
    # --prune never touches it.
    loopd(case.home.root, "branches", "--prune")
    assert git(case.repo, "rev-parse", "--verify", theirs.branch)


# -- today's `land` ----------------------------------------------------------------------------


def test_texts_about_a_landing_say_the_loops_land_today(tmp_path: Path) -> None:
    case = land_case(tmp_path, FIXER, land="merge")
    (case.repo / "check.py").write_text((case.repo / "check.py").read_text() + "# mine\n")
    run = run_once(case)
    assert run.outcome == "succeeded" and not run.landed and run.land == "merge"
    shown = loopd(case.home.root, "show", run.id).stdout
    assert "not landed (merge): main is checked out" in shown
    set_land(case, "branch")
    for text in (
        loopd(case.home.root, "show", run.id).stdout,
        loopd(case.home.root, "runs").stdout,
        loopd(case.home.root, "branches").stdout,
    ):
        flat = " ".join(text.split())
        assert 'not landed (branch): the loop has land = "branch"' in flat, text
        assert "(merge)" not in flat
    set_land(case, "push")
    flat = " ".join(loopd(case.home.root, "show", run.id).stdout.split())
    assert "not landed (push): main is checked out" in flat
    report = build_report(case.store, run.started, run.finished)  # type: ignore[arg-type]
    [ready] = [row for row in report.ready if row.run == run.id]
    assert ready.land == "push" and "checked out" in ready.why
