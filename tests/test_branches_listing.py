"""`loopd branches` at scale: the net lines kept in the run index follow the branches, a hand
merge the index did not foresee is still noticed, and the output is what print_json and rich
print, byte for byte."""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime, timedelta, timezone
from enum import StrEnum
from pathlib import Path

from daemon.cli.branches import _rich_changes, json_text
from daemon.cli.jsonout import json_value
from daemon.landing.branches import list_branches
from daemon.state.records import RunRecord, RunTrigger, make_run_id
from daemon.state.runindex import INDEX_FILE
from daemon.state.store import StateStore
from tests.helpers import git, make_repo

NOW = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)


def numstat(repo: Path, base: str, tip: str) -> tuple[int, int]:
    """What `git diff --numstat --no-renames` counts, summed."""
    added = removed = 0
    for line in git(repo, "diff", "--numstat", "--no-renames", base, tip).splitlines():
        plus, minus, _ = line.split("\t", 2)
        added += int(plus) if plus.isdigit() else 0
        removed += int(minus) if minus.isdigit() else 0
    return added, removed


def run_with_branch(store: StateStore, repo: Path, n: int, **fields: object) -> RunRecord:
    started = NOW + timedelta(minutes=n)
    run_id = make_run_id("calc", started)
    run = RunRecord(
        id=run_id,
        loop="calc",
        task="Make check.py pass.",
        trigger=RunTrigger(kind="schedule", ts=started),
        started=started,
        finished=started + timedelta(minutes=5),
        branch=f"loopd/calc/{run_id}",
        repo=str(repo),
        target="main",
        land="branch",
        **fields,
    )
    store.run_dir(run.id).mkdir(parents=True, exist_ok=True)
    store.save_run(run)
    return run


def commit_on(repo: Path, branch: str, start: str, files: dict[str, str]) -> str:
    git(repo, "checkout", "-q", "-B", branch, start)
    for name, text in files.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"work on {branch}")
    git(repo, "checkout", "-q", "main")
    return git(repo, "rev-parse", branch).strip()


def listed(store: StateStore, repo: Path) -> dict[str, tuple[int, int]]:
    rows = list_branches(store, {"calc": repo}, NOW + timedelta(days=1))
    return {row.run: (row.added, row.removed) for row in rows}


def test_kept_lines_follow_a_moved_branch_and_the_diff_algorithm(tmp_path: Path) -> None:
    text = "".join(f"line {n}\n" for n in range(30))
    repo = make_repo(tmp_path / "repo", {"a.txt": text, "b.txt": "keep\n"})
    base = git(repo, "rev-parse", "HEAD").strip()
    store = StateStore(tmp_path / "state")
    run = run_with_branch(store, repo, 1, outcome="escalated", base_commit=base)
    gone = run_with_branch(store, repo, 2, outcome="escalated", base_commit="0" * 40)
    tip = commit_on(repo, run.branch, base, {"a.txt": text.replace("line 3\n", "3\n")})
    commit_on(repo, gone.branch, base, {"c.txt": "new\n"})
    first = listed(store, repo)
    assert first[run.id] == numstat(repo, base, tip) == (1, 1)
    assert first[gone.id] == (0, 0)  # a base the repository lacks: git cannot say
    kept = json.loads((store.root / INDEX_FILE).read_text())["lines"]
    assert kept[run.id] == f"{base} {tip} 1 1 "
    assert gone.id not in kept  # asked again next time, never kept as (0, 0)
    # Kept: a second listing answers the same (and asks git no diff).
    assert listed(store, repo) == first
    # The branch moves: counted again.
    moved = commit_on(repo, run.branch, tip, {"b.txt": "keep\nmore\nand more\n"})
    assert listed(store, repo)[run.id] == numstat(repo, base, moved) == (3, 1)
    # Another diff algorithm: counted again with it, as `git diff` would.
    git(repo, "config", "diff.algorithm", "patience")
    assert listed(store, repo)[run.id] == numstat(repo, base, moved)
    kept = json.loads((store.root / INDEX_FILE).read_text())["lines"]
    assert kept[run.id].endswith(" patience")
    # The run's folder goes: so do its kept lines.
    for path in store.run_dir(run.id).iterdir():
        path.unlink()
    store.run_dir(run.id).rmdir()
    listed(store, repo)
    assert run.id not in json.loads((store.root / INDEX_FILE).read_text())["lines"]


def test_a_hand_merge_the_index_did_not_foresee_is_noticed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "one\n"})
    base = git(repo, "rev-parse", "HEAD").strip()
    store = StateStore(tmp_path / "state")
    run = run_with_branch(store, repo, 1, outcome=None, phase="judging", base_commit=base)
    commit_on(repo, run.branch, base, {"a.txt": "one\ntwo\n"})
    [row] = list_branches(store, {"calc": repo}, NOW)
    assert row.outcome == "(judging)" and not row.landed  # a run still going never landed
    # The run ends and a person merges its branch: the index still has it going (a guess
    # that asks git nothing ahead), the record says otherwise and is what counts.
    whole = store.load_run(run.id)
    whole.outcome, whole.phase = "succeeded", "idle"
    store.save_run(whole)
    git(repo, "merge", "-q", "--ff-only", run.branch)
    [row] = list_branches(store, {"calc": repo}, NOW)
    assert row.landed and "(by hand)" in row.landing
    saved = store.load_run(run.id)
    assert saved.landed_how == "by hand" and saved.landed_as == git(repo, "rev-parse", "main")
    # A run the index knows ended: its target's question is asked ahead, with the same answer.
    main = git(repo, "rev-parse", "main").strip()
    later = run_with_branch(store, repo, 2, outcome="escalated", base_commit=main)
    commit_on(repo, later.branch, main, {"b.txt": "b\n"})
    assert not {row.run: row for row in list_branches(store, {"calc": repo}, NOW)}[later.id].landed
    git(repo, "merge", "-q", "--ff-only", later.branch)
    rows = {row.run: row for row in list_branches(store, {"calc": repo}, NOW)}
    assert rows[later.id].landed and "(by hand)" in rows[later.id].landing
    assert store.load_run(later.id).landed_as == git(repo, "rev-parse", "main")


class Outcome(StrEnum):
    DONE = "succ%seeded"


def test_json_text_is_print_json_byte_for_byte() -> None:
    when = datetime(2026, 3, 2, 9, 30, 5, 120, tzinfo=UTC)
    rows = [
        {
            "repo": '/tmp/r\u00e9po "x"\\y',
            "n%s": 3,
            "landed": True,
            "finished": when,
            "outcome": Outcome.DONE,
            "live": False,
        },
        {
            "repo": "\x01tab\there",
            "n%s": -7,
            "landed": False,
            "finished": None,
            "outcome": "(preparing)",
            "live": True,
        },
        {
            "repo": "",
            "n%s": 10**20,
            "landed": False,
            "finished": when.astimezone(timezone(timedelta(hours=-5))),
            "outcome": "x",
            "live": False,
        },
        {
            "repo": "naive",
            "n%s": 0,
            "landed": True,
            "finished": when.replace(tzinfo=None),
            "outcome": "y",
            "live": 1.5,
        },
    ]
    cases = [
        {"branches": rows, "deleted": ["loopd/calc/a", "loopd/calc/b"]},
        {"branches": [], "deleted": []},
        {"branches": [{"a": 1}, {"b": 2}, {}], "deleted": [1, None, "z", True]},
        {"branches": [rows[0], {**rows[1], "extra": 1}], "deleted": []},
    ]
    for value in cases:
        assert json_text(value) == json.dumps(value, default=json_value, indent=2) + "\n"


def test_rich_changes_are_found_where_the_pattern_finds_them() -> None:
    pattern = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]|:\S*?:")
    alphabet = ["a", "b", ":", " ", "\n", "\t", "\x00", "\x1f", "\x7f", "\u00e9", "\u3000", "-"]
    rng = random.Random(26)
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        assert _rich_changes(text) == (pattern.search(text) is not None), repr(text)
