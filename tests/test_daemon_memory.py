"""What the daemon's long-lived parts keep grows with what is on disk, not with its life (#41).

The aftermath's Follower keeps no record of a run it does not follow: a daemon that lands
nothing still reads every succeeded run once, to see whether it landed, and each record kept
for that grew a one-life daemon by megabytes an hour (18 KB a record, some 300 unlanded
successes an hour in the soak). Real StateStore, real git repository.
"""

from __future__ import annotations

import gc
import shutil
from datetime import timedelta
from pathlib import Path

from daemon.home import Home
from daemon.service.aftermath import Follower
from daemon.service.metrics import MAX_CHECKED, Metrics
from daemon.state.records import RunRecord
from daemon.state.store import StateStore
from tests.helpers import git, make_home, make_repo
from tests.test_branches_listing import NOW, run_with_branch
from tests.test_service import Clocks, context

LOOP = 'task = "Make check.py pass."\nrepo = "{repo}"\nchecks = ["true"]\non_push = ["main"]\n'


def _records_held(follower: Follower) -> set[str]:
    """The ids of every RunRecord reachable from the Follower's own state."""
    found: set[str] = set()
    seen: set[int] = set()
    todo: list[object] = [vars(follower)]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or obj is follower.ctx:
            continue
        seen.add(id(obj))
        if isinstance(obj, RunRecord):
            found.add(obj.id)
            continue
        if isinstance(obj, dict | list | tuple | set | frozenset):
            todo.extend(gc.get_referents(obj))
    return found


def test_unlanded_runs_are_remembered_by_stat_only_and_a_landing_is_followed(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo")
    home = Home(make_home(tmp_path / "home", loops={"calc": LOOP.format(repo=repo)}))
    store = StateStore(home.state_dir)
    runs = [run_with_branch(store, repo, n, outcome="succeeded") for n in range(40)]
    escalated = run_with_branch(store, repo, 41, outcome="escalated")
    follower = Follower(context(home, Clocks()))

    follower.follow(NOW + timedelta(hours=1))
    assert _records_held(follower) == set()
    assert set(follower._seen) == {r.id for r in runs}  # each read once, kept as its stat
    assert escalated.id in follower._done

    # One of them lands (its run.toml changes): read again and followed, its record kept.
    landed = runs[7].model_copy(
        update={"landed": True, "landed_as": git(repo, "rev-parse", "main").strip()}
    )
    store.save_run(landed)
    follower.follow(NOW + timedelta(hours=2))
    assert _records_held(follower) == {landed.id}
    assert landed.id not in follower._seen

    # Runs pruned from state/ (their folders removed, as housekeeping does) are forgotten.
    for run in [*runs[:20], escalated]:
        shutil.rmtree(store.run_dir(run.id))
    follower.follow(NOW + timedelta(hours=3))
    listed = set(store.run_ids())
    assert len(listed) == 20
    assert set(follower._seen) == listed - {landed.id} and not follower._done


def test_metrics_keep_a_bounded_number_of_attempts_waiting_for_a_verdict(tmp_path: Path) -> None:
    """Attempts whose checks ran and whose verdict never came (a run interrupted between the
    two): the oldest are dropped past MAX_CHECKED, the newest still timed."""
    store = StateStore(tmp_path / "state")
    metrics = Metrics(store, None, lambda: {})
    store.events.observers.append(metrics.observe)
    for n in range(MAX_CHECKED + 500):
        store.events.append(
            "checks", NOW, loop="app", run=f"r{n}", attempt=1, passed=True, results=[]
        )
    assert len(metrics._checked) == MAX_CHECKED
    last = f"r{MAX_CHECKED + 499}"
    store.events.append(
        "verdict", NOW + timedelta(seconds=4), loop="app", run=last, attempt=1, judged=True,
        verdict="pass", passed=True, score=8,
    )  # fmt: skip
    sums = [s.value for s in metrics.judge_seconds.collect()[0].samples if s.name.endswith("_sum")]
    assert sums == [4.0]  # the newest attempt's checks-to-verdict time, the only one observed
