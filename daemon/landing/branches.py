"""Run branches (`loopd/LOOP/RUN_ID`) in the person's repositories: empty ones go, the rest
are listed with what they hold, and landed or expired ones can be pruned.

A branch whose net diff against its run's base is empty holds nothing worth reviewing (a
cancelled run, an agent that changed nothing, a skipped run): it is deleted when the run
ends. Every deletion is recorded in the ref ledger first.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from daemon.git.safe import GitError
from daemon.git.userrepo import LedgerWriter, UserRepo
from daemon.people.landstate import landing_state
from daemon.people.since import run_ids_since
from daemon.runs.journal import RunJournal
from daemon.state.eventtypes import Event
from daemon.state.ledger import ledger_of
from daemon.state.records import RunRecord
from daemon.state.store import StateStore

PREFIX = "refs/heads/loopd/"


def same_tree(user: UserRepo, a: str, b: str) -> bool:
    """Whether two commits hold the same files (an empty net diff)."""
    trees = user.git.out("rev-parse", f"{a}^{{tree}}", f"{b}^{{tree}}").split()
    return len(trees) == 2 and trees[0] == trees[1]


def delete_if_empty(journal: RunJournal) -> bool:
    """Delete the run's branch when it changed nothing against its base; True when deleted."""
    run = journal.run
    if run.isolation == "in-place" or not run.branch.startswith("loopd/") or not run.base_commit:
        return False  # in place, the branch is the person's own
    try:
        user = UserRepo.locate(Path(run.repo))
        tip = user.ref(f"refs/heads/{run.branch}")
        if not tip or not same_tree(user, run.base_commit, tip):
            return False
        user.git.run("worktree", "prune", check=False)
        writer = LedgerWriter(ledger_of(journal.services.store.root), journal.now, run.id)
        deleted = user.delete_ref(writer, f"refs/heads/{run.branch}", "empty run branch")
    except (GitError, OSError) as exc:
        journal.event(Event.BRANCH_DELETE_FAILED, branch=run.branch, error=str(exc)[:300])
        return False
    if deleted:
        journal.event(Event.BRANCH_DELETED, branch=run.branch, why="the run changed nothing")
        # The record names only what exists: the escalation, `trigger --wait` and the
        # progress notes read `branch`, and a retry finds nothing to build on.
        run.branch_gone(run.branch)
        journal.save()
    return deleted


def notice_landed(store: StateStore, run: RunRecord, now: datetime) -> bool:
    """Record a run whose branch a person merged by hand (its tip is on the target) as
    landed "by hand"; True when this call recorded it."""
    if run.landed or run.outcome is None or not run.target or not run.branch:
        return False
    if run.isolation == "in-place" or run.id in store.live_runs():
        return False
    try:
        user = UserRepo.locate(Path(run.repo))
        tip = user.ref(f"refs/heads/{run.branch}")
        target = user.ref(f"refs/heads/{run.target}")
        if not tip or not target or tip == run.base_commit:
            return False  # a branch that holds nothing of the run's is not its work landed
        contained = user.git.run("merge-base", "--is-ancestor", tip, target, check=False)
    except (GitError, OSError):
        return False
    if contained.returncode != 0:
        return False
    run.landed, run.landed_as, run.landed_how, run.landing = True, target, "by hand", ""
    store.save_run(run)
    store.events.append(
        Event.LANDED,
        now,
        loop=run.loop,
        run=run.id,
        land="by hand",
        target=run.target,
        commit=target,
    )
    return True


def notice_hand_merges(store: StateStore, since: datetime, now: datetime) -> list[str]:
    """Record as landed "by hand" the runs since `since` whose branch a person merged; their
    ids."""

    found = []
    for run_id in run_ids_since(store, since):
        try:
            run = store.load_run(run_id)
        except Exception:  # noqa: BLE001 - one broken record must not stop the others
            continue
        if run.outcome == "succeeded" and notice_landed(store, run, now):
            found.append(run_id)
    return found


@dataclass
class RunBranch:
    """One run branch, as `loopd branches` shows it."""

    repo: str
    branch: str
    tip: str
    loop: str
    run: str
    outcome: str = ""  # "" when the run has no record here
    added: int = 0
    removed: int = 0
    landed: bool = False
    landing: str = ""  # the run's landing state (people/landstate.py)
    finished: datetime | None = None
    live: bool = False


def list_branches(
    store: StateStore, repos: dict[str, Path], now: datetime, loop: str = ""
) -> list[RunBranch]:
    """The run branches of the home's loops (or of `loop`) in their repositories; a branch a
    person merged by hand is recorded landed as of `now`."""
    live = set(store.live_runs())
    out: list[RunBranch] = []
    seen: set[Path] = set()
    for repo in sorted(set(repos.values())):
        if repo in seen or not repo.is_dir():
            continue
        seen.add(repo)
        try:
            user = UserRepo.locate(repo)
            refs = user.git.out(
                "for-each-ref", "--format=%(refname) %(objectname)", PREFIX
            ).splitlines()
        except GitError:
            continue
        for line in refs:
            ref, _, tip = line.partition(" ")
            parts = ref[len("refs/heads/") :].split("/")
            if len(parts) != 3 or (loop and parts[1] != loop):
                continue
            if repos.get(parts[1], repo) != repo:
                continue  # another loop's repository is where its branches are
            out.append(_describe(store, user, repo, parts, tip, live, now))
    return out


def _describe(
    store: StateStore,
    user: UserRepo,
    repo: Path,
    parts: list[str],
    tip: str,
    live: set[str],
    now: datetime,
) -> RunBranch:
    _, loop, run_id = parts
    row = RunBranch(str(repo), "/".join(parts), tip, loop, run_id, live=run_id in live)
    record: RunRecord | None
    try:
        record = store.load_run(run_id)
    except Exception:  # noqa: BLE001 - a branch without a readable record is still listed
        record = None
    base = record.base_commit if record is not None else ""
    if record is not None:
        notice_landed(store, record, now)  # a live run's branch is never landed
        row.outcome = record.outcome or f"({record.phase})"
        row.finished = record.finished
        row.landed = record.landed
        row.landing = landing_state(record).line()
    if base:
        numstat = user.git.out("diff", "--numstat", "--no-renames", base, tip, check=False)
        for stat in numstat.splitlines():
            added, removed, _ = (stat.split("\t") + ["", ""])[:3]
            row.added += int(added) if added.isdigit() else 0
            row.removed += int(removed) if removed.isdigit() else 0
    return row


def _forget(store: StateStore, run_id: str, branch: str) -> None:
    """The run's record no longer names a branch that was deleted."""
    try:
        run = store.load_run(run_id)
    except Exception:  # noqa: BLE001 - a branch without a readable record has nothing to fix
        return
    if run.branch == branch:
        run.branch_gone(branch)
        store.save_run(run)


def prune_branches(
    store: StateStore, rows: list[RunBranch], retain_days: int, now: datetime
) -> list[RunBranch]:
    """Delete the landed branches, and those of runs finished more than `retain_days` ago
    (0: none expire); never a live run's. The ones deleted."""
    cutoff = now - timedelta(days=retain_days) if retain_days > 0 else None
    deleted = []
    for row in rows:
        if row.live:
            continue
        expired = cutoff is not None and row.finished is not None and row.finished < cutoff
        if not (row.landed or expired):
            continue
        writer = LedgerWriter(ledger_of(store.root), lambda: now, row.run)
        try:
            user = UserRepo.locate(Path(row.repo))
            user.git.run("worktree", "prune", check=False)
            if user.delete_ref(writer, f"refs/heads/{row.branch}", "pruned by loopd branches"):
                deleted.append(row)
                _forget(store, row.run, row.branch)
                why = "landed" if row.landed else f"older than retain_days ({retain_days})"
                store.events.append(
                    Event.BRANCH_DELETED,
                    now,
                    loop=row.loop,
                    run=row.run,
                    branch=row.branch,
                    why=why,
                )
        except GitError:
            continue
    return deleted
