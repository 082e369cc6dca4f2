"""The run index (state/runs-index.json) and the batched git questions of `loopd branches`:
what they answer is what reading each record and asking git per branch answered."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from daemon.landing.refbatch import net_lines, read_refs
from daemon.state.records import RunRecord, RunTrigger, make_run_id
from daemon.state.runindex import INDEX_FILE, RunIndex, refresh
from daemon.state.store import StateStore
from tests.helpers import git, make_repo

NOW = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)


def record(store: StateStore, n: int, **fields: object) -> RunRecord:
    started = NOW + timedelta(minutes=n)
    run = RunRecord(
        id=make_run_id("calc", started),
        loop="calc",
        task="Make check.py pass.",
        trigger=RunTrigger(kind="experiment" if n == 2 else "schedule", ts=started),
        started=started,
        **fields,
    )
    store.run_dir(run.id).mkdir(parents=True, exist_ok=True)
    store.save_run(run)
    return run


def test_the_index_answers_as_the_records_and_follows_their_changes(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    first = record(store, 1, outcome="succeeded", branch="loopd/calc/x", target="main")
    second = record(store, 2, outcome="escalated", finished=NOW + timedelta(hours=1))
    ids = [first.id, second.id, "20260302T093000Z-calc-gone"]
    index = RunIndex(store)
    got = index.records(ids)
    index.save(store.run_ids())
    assert set(got) == {first.id, second.id}  # a run without a record is left out
    for run in (first, second):
        part = got[run.id]
        assert (part.outcome, part.branch, part.target, part.finished) == (
            run.outcome,
            run.branch,
            run.target,
            run.finished,
        )
        assert part.trigger.kind == run.trigger.kind
    # A record saved since is read again; the cached one answers for the other.
    first.landed, first.landed_how = True, "by hand"
    store.save_run(first)
    again = RunIndex(store).records(ids)
    assert again[first.id].landed is True and again[first.id].landed_how == "by hand"
    assert again[second.id].outcome == "escalated"
    # A damaged index costs a slow listing, never a wrong one.
    (store.root / INDEX_FILE).write_text("{not json")
    assert RunIndex(store).records(ids)[first.id].landed is True


def test_refresh_indexes_every_record(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    runs = [record(store, n, outcome="succeeded") for n in range(3)]
    refresh(store)
    data = json.loads((store.root / INDEX_FILE).read_text())
    assert sorted(data["runs"]) == sorted(run.id for run in runs)


def test_net_lines_count_as_git_diff_numstat(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "one\ntwo\nthree\n", "b.txt": "keep\n"})
    base = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "-b", "loopd/calc/one")
    (repo / "a.txt").write_text("one\n2\nthree\nfour\n")
    (repo / "blob.bin").write_bytes(b"\x00\x01\x02binary")
    git(repo, "mv", "b.txt", "moved.txt")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "change")
    git(repo, "checkout", "-q", "-b", "loopd/calc/same", base)
    git(repo, "commit", "-q", "--allow-empty", "-m", "nothing")
    git(repo, "config", "diff.algorithm", "patience")
    refs = read_refs(repo)
    assert refs is not None
    pairs = {(base, refs.tip("loopd/calc/one")), (base, refs.tip("loopd/calc/same"))}
    pairs.add(("0" * 40, refs.tip("loopd/calc/one")))  # a base the repository lacks
    got = net_lines(refs, pairs)
    for base_commit, tip in pairs:
        numstat = (
            git(repo, "diff", "--numstat", "--no-renames", base_commit, tip)
            if (base_commit != "0" * 40)
            else ""
        )
        added = removed = 0
        for line in numstat.splitlines():
            plus, minus, _ = line.split("\t", 2)
            added += int(plus) if plus.isdigit() else 0
            removed += int(minus) if minus.isdigit() else 0
        assert got[(base_commit, tip)] == (added, removed)
    assert got[(base, refs.tip("loopd/calc/one"))] != (0, 0)


def test_an_entry_of_another_shape_is_read_again(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    run = record(store, 1, outcome="succeeded", finished=NOW + timedelta(hours=1))
    index = RunIndex(store)
    index.records([run.id])
    index.save()
    path = store.root / INDEX_FILE
    good = json.loads(path.read_text())
    for damage in ("not a time", 7, None):
        data = json.loads(json.dumps(good))
        data["runs"][run.id][-1] = damage  # the identity still matches the run.toml
        path.write_text(json.dumps(data))
        got = RunIndex(store).records([run.id])[run.id]
        want = None if damage is None else run.finished
        assert (got.finished, got.outcome, got.trigger.kind) == (want, "succeeded", "schedule")
    data = json.loads(json.dumps(good))
    data["runs"][run.id] = data["runs"][run.id][:-1]
    path.write_text(json.dumps(data))
    assert RunIndex(store).records([run.id])[run.id].finished == run.finished
