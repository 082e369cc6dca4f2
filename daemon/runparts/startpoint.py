"""Where a run starts and where its work is meant to go, fixed when the run starts.

- `target`: the branch a landing moves (`land = "merge"`) or a pull request names
  (`land = "push"`): the loop's `target`, else the branch its `base` names; recorded with the
  commit it points at, so landing can tell whether it moved since.
- `build_on = "last-success"`: the newest run of the loop that succeeded and has not landed,
  whose branch is still there and still contains the base, is the run's start; the runs it
  was built on are recorded, so landing this one marks them landed too. A run branch whose
  tip is already on the target counts as landed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from daemon.config import LoopConfig
from daemon.config.land import land_target
from daemon.git.safe import GitError
from daemon.git.userrepo import UserRepo
from daemon.runparts import decisions
from daemon.runparts.journal import RunJournal
from daemon.state.eventtypes import Event
from daemon.state.landholds import effective_land
from daemon.state.records import RunRecord, is_experiment
from daemon.state.store import StateStore

SCAN = 200  # runs of the loop looked at, newest first


@dataclass
class StartPoint:
    """The base a run starts from and the runs whose work it continues."""

    base: str
    built_on: list[str] = field(default_factory=list)


def start_point(
    journal: RunJournal, user: UserRepo, cfg: LoopConfig, target: bool = True
) -> StartPoint:
    """Where the run starts (a retry's base, `build_on`'s, else the loop's `base`), with its
    landing target and the runs it builds on recorded: the one start of both engines.
    `target` False: the caller records the landing target itself (`landing_target`)."""
    run, store = journal.run, journal.services.store
    if target and decisions.records_target(cfg.isolation):
        record_target(run, user, cfg, store)
    start = _retry_start(store, user, run) or _last_success_start(journal, user, cfg)
    start = start or StartPoint(cfg.base)
    run.built_on = list(start.built_on)
    return start


def _retry_start(store: StateStore, user: UserRepo, run: RunRecord) -> StartPoint | None:
    """A retry builds on what the earlier run's branch holds, when it still exists."""
    if not run.trigger.retry_of:
        return None
    try:
        earlier = store.load_run(run.trigger.retry_of)
    except (OSError, ValueError):
        return None
    ref = decisions.retry_base(run, earlier)
    try:
        found = bool(ref) and bool(user.ref(ref))
    except GitError:
        return None
    return StartPoint(ref, [*earlier.built_on]) if found else None


def _last_success_start(journal: RunJournal, user: UserRepo, cfg: LoopConfig) -> StartPoint | None:
    """`build_on = "last-success"`: the newest run of the loop to continue, when there is one."""
    run = journal.run
    if not decisions.builds_on_last_success(cfg.build_on, cfg.isolation):
        return None
    try:
        base_commit = user.resolve(cfg.base)
    except GitError:
        return None  # preparing the tree says what is wrong with the base
    found = last_success(journal.services.store, user, run.loop, run.id, base_commit)
    if found is not None:
        journal.event(Event.BUILD_ON, run_built_on=found.built_on[0], base=found.base)
    return found


def is_ancestor(user: UserRepo, ancestor: str, descendant: str) -> bool:
    done = user.git.run("merge-base", "--is-ancestor", ancestor, descendant, check=False)
    return done.returncode == 0


def record_target(run: RunRecord, user: UserRepo, cfg: LoopConfig, store: StateStore) -> None:
    """`land` (`branch` while reverts hold the loop there), `target` and the target's commit
    now, into the run's record."""
    held = effective_land(store, run.loop, cfg.land) != cfg.land
    run.land, run.target, run.target_commit = landing_target(user, cfg, is_experiment(run) or held)


def landing_target(user: UserRepo, cfg: LoopConfig, experiment: bool) -> tuple[str, str, str]:
    """A run's `land`, `target` and the target's commit now (git: safe on a thread)."""
    target = land_target(user.top, cfg)
    commit = user.ref(f"refs/heads/{target}") if target else ""
    return ("branch" if experiment else cfg.land), target, commit


def landed_by_reach(user: UserRepo, run: RunRecord, tip: str) -> bool:
    """Whether the run's branch tip is on its target (or the loop's base) already."""
    target = run.target and user.ref(f"refs/heads/{run.target}")
    return bool(target) and is_ancestor(user, tip, target)


def last_success(
    store: StateStore, user: UserRepo, loop: str, run_id: str, base_commit: str
) -> StartPoint | None:
    """The newest succeeded, not landed run of `loop` whose branch still contains the base."""
    live = set(store.live_runs())
    for other_id in list(reversed(store.run_ids(loop)))[:SCAN]:
        if other_id == run_id or other_id in live:
            continue
        try:
            other = store.load_run(other_id)
        except Exception:  # noqa: BLE001 - an unreadable record is no candidate
            continue
        if other.loop != loop or other.outcome != "succeeded" or is_experiment(other):
            continue
        if other.landed or other.isolation == "in-place" or not other.branch:
            return None  # what came before it landed, or is on a branch of the user's own
        tip = user.ref(f"refs/heads/{other.branch}")
        if not tip:
            continue
        if landed_by_reach(user, other, tip):
            return None
        if is_ancestor(user, base_commit, tip):
            return StartPoint(f"refs/heads/{other.branch}", [other.id, *other.built_on])
    return None
