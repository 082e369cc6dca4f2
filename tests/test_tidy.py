"""The housekeeper's tidying, in process on real repositories: run branches their target
contains are deleted (a hand merge recorded first), `git gc --auto` runs at most once a day
per repository, and rotated event files follow `retain_days`."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from daemon.home import Home
from daemon.service.housekeeper import Housekeeper
from daemon.service.indexrefresh import refresh_apart
from daemon.service.tidy import maintain_repositories, prune_rotated_events
from daemon.state.events import EventLog
from daemon.state.records import RunRecord, RunTrigger
from daemon.state.runindex import RunIndex
from tests.helpers import git
from tests.test_service import Clocks, context, home_with

NOW = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)


def of_type(ctx: object, type: str) -> list[dict]:
    return [e for e in ctx.store.events.read() if e["type"] == type]  # type: ignore[attr-defined]


def run_branch(ctx: object, repo: Path, n: int, outcome: str | None, **fields: object) -> RunRecord:
    """A run of `app` whose branch holds one commit on main's first commit."""
    store = ctx.store  # type: ignore[attr-defined]
    run_id = store.new_run_id("app", NOW + timedelta(minutes=n))
    branch = f"loopd/app/{run_id}"
    base = git(repo, "rev-parse", "main")
    git(repo, "checkout", "-q", "-b", branch, base)
    (repo / f"file{n}.txt").write_text(f"{n}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"run {n}")
    git(repo, "checkout", "-q", "main")
    run = RunRecord(id=run_id, loop="app", task="t", trigger=RunTrigger(kind="push"),
                    started=NOW, finished=NOW if outcome else None, outcome=outcome,
                    branch=branch, repo=str(repo), base_commit=base, target="main",
                    land="merge", **fields)  # type: ignore[arg-type]  # fmt: skip
    store.save_run(run)
    return run


def test_branches_the_target_contains_are_deleted_and_the_others_kept(tmp_path: Path) -> None:
    clocks = Clocks()
    ctx = context(home_with(tmp_path, paused=False), clocks)
    repo = tmp_path / "repo"
    landed = run_branch(ctx, repo, 1, "succeeded", landed=True, landed_how="merge")
    by_hand = run_branch(ctx, repo, 2, "succeeded")
    failed = run_branch(ctx, repo, 3, "escalated")
    live = run_branch(ctx, repo, 4, None)
    ctx.store.mark_live(live.id)
    for run in (landed, by_hand, live):
        git(repo, "merge", "-q", "--no-edit", run.branch)

    keeper = Housekeeper(ctx)
    keeper.tick(NOW, keep=set())
    keeper.join(60)

    left = git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/loopd/").split()
    assert left == sorted([failed.branch, live.branch])
    deleted = {e["run"]: e for e in of_type(ctx, "branch_deleted")}
    assert set(deleted) == {landed.id, by_hand.id}
    assert deleted[by_hand.id]["why"] == "main contains it"
    hand = ctx.store.load_run(by_hand.id)
    assert (hand.landed, hand.landed_how) == (True, "by hand")  # recorded before it went
    assert (hand.branch, hand.branch_deleted) == ("", by_hand.branch)
    assert ctx.store.load_run(failed.id).branch == failed.branch
    # The kept branch's +/- lines are counted ahead, for the person's `loopd branches`.
    index = json.loads((ctx.store.root / "runs-index.json").read_text())
    assert failed.id in index["lines"] and failed.id in index["runs"]


def packs(repo: Path) -> int:
    stats = dict(line.split(": ") for line in git(repo, "count-objects", "-v").splitlines())
    return int(stats["packs"])


def test_gc_auto_runs_at_most_once_a_day_per_repository(tmp_path: Path) -> None:
    clocks = Clocks()
    ctx = context(home_with(tmp_path, paused=False), clocks)
    repo = tmp_path / "repo"
    for n in range(6):  # a pack per run, as loopd's fetches leave them
        (repo / f"f{n}.txt").write_text(f"{n}\n")
        git(repo, "add", "-A")
        git(repo, "-c", "gc.auto=0", "commit", "-q", "-m", f"c{n}")
        git(repo, "repack", "-q")
    assert packs(repo) >= 6
    git(repo, "config", "gc.autoPackLimit", "4")  # git's default is 50: fewer packs here

    maintain_repositories(ctx, NOW)
    [done] = of_type(ctx, "repo_maintained")
    assert done["packs_before"] >= 6 and done["packs_after"] == 1 == packs(repo)
    assert done["loop"] == "app" and not done["skipped"]

    # Again within the day (a restart, say): nothing; a day later: once more.
    maintain_repositories(ctx, NOW + timedelta(hours=23))
    assert len(of_type(ctx, "repo_maintained")) == 1
    marks = (ctx.store.root / "maintenance.toml").read_text()
    assert str(Path(git(repo, "rev-parse", "--absolute-git-dir"))) in marks
    maintain_repositories(ctx, NOW + timedelta(days=1))
    assert len(of_type(ctx, "repo_maintained")) == 2

    # A repository whose own config turns auto gc off is left as the person asked.
    git(repo, "config", "gc.auto", "0")
    maintain_repositories(ctx, NOW + timedelta(days=2))
    assert of_type(ctx, "repo_maintained")[-1]["skipped"] == "gc.auto = 0 in its config"


def test_rotated_event_files_follow_retention_and_numbers_keep_counting_up(
    tmp_path: Path,
) -> None:
    home = Home(home_with(tmp_path).root)
    store = home.state()
    folder = store.events.path.parent
    old = (NOW - timedelta(days=40)).timestamp()
    for n in (1, 2, 3):
        path = folder / f"events-{n}.jsonl"
        path.write_text(json.dumps({"ts": "old", "type": "x"}) + "\n")
        os.utime(path, (old, old))
    (folder / "events-4.jsonl").write_text("{}\n")  # written to recently: kept
    store.events.append("daemon_started", NOW, pid=1, version="test")

    assert prune_rotated_events(store, 30, NOW) == [f"events-{n}.jsonl" for n in (1, 2, 3)]
    assert sorted(p.name for p in folder.glob("events*.jsonl")) == [
        "events-4.jsonl",
        "events.jsonl",
    ]
    assert prune_rotated_events(store, 0, NOW + timedelta(days=400)) == []  # 0 keeps all

    # The next rotation is events-5, not the freed events-1: the highest is the newest.
    log = EventLog(store.events.path, rotate_bytes=10)
    log.append("daemon_started", NOW, pid=1, version="fills")
    log.append("daemon_started", NOW, pid=1, version="rotates")
    assert (folder / "events-5.jsonl").exists() and not (folder / "events-1.jsonl").exists()


def test_the_hourly_index_refresh_runs_in_a_child_and_gives_its_memory_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run index and the branches' lines are brought up to date by a child process (the
    soak's hourly RSS steps were the daemon parsing every record itself): with the parent's
    own refresh and listing broken, the index is written all the same."""

    def broken(*args: object, **kwargs: object) -> None:
        raise AssertionError("the daemon read or wrote the index itself")

    # The class's methods: whoever calls them in this process (a child imports its own).
    monkeypatch.setattr(RunIndex, "records", broken)
    monkeypatch.setattr(RunIndex, "save", broken)
    ctx = context(home_with(tmp_path, paused=False), Clocks())
    repo = tmp_path / "repo"
    kept = [run_branch(ctx, repo, n, "escalated") for n in (1, 2)]

    keeper = Housekeeper(ctx)
    keeper.tick(NOW, keep=set())
    keeper.join(60)

    index = json.loads((ctx.store.root / "runs-index.json").read_text())
    assert {run.id for run in kept} <= set(index["runs"]) & set(index["lines"])
    assert index["lines"][kept[0].id]  # its branch's +1 line counted by the child


def test_an_index_refresh_that_fails_says_why_and_leaves_the_daemon_alone(tmp_path: Path) -> None:
    """A child that cannot do it (here: a state folder that is a file) is reported, not raised."""
    ctx = context(home_with(tmp_path, paused=False), Clocks())
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("x")
    ctx.store.root = blocked
    assert refresh_apart(ctx.store, {}, NOW, timeout=60)


def test_the_index_refresh_child_ends_with_the_daemon_that_started_it(tmp_path: Path) -> None:
    """The child is in a session of its own: a daemon stopped mid-refresh must take it along,
    or it writes state/ after `loopd run` has exited. A real parent that starts the child's
    code (here held in a sleep) and exits at once; the child is gone soon after."""
    import subprocess
    import sys
    import time

    child = (
        "import os, time; from daemon.service.indexrefresh import die_with_parent; "
        "die_with_parent(int(os.environ['PARENT'])); time.sleep(120)"
    )
    parent = (
        "import os, subprocess, sys\n"
        f"p = subprocess.Popen([sys.executable, '-c', {child!r}], start_new_session=True,\n"
        "    env=dict(os.environ, PARENT=str(os.getpid())))\n"
        "print(p.pid, flush=True)\n"
        "import time; time.sleep(1.5)\n"  # the child has set its signal by now
    )
    out = subprocess.run(
        [sys.executable, "-c", parent], capture_output=True, text=True, timeout=60, check=True
    )
    pid = int(out.stdout.split()[0])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state == "Z":
            break  # killed, not reaped yet by whoever adopted it
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        raise AssertionError("the child outlived its parent")
