"""Run branches their target contains are deleted: the work is on the target (landed by
loopd, or merged by a person), so the branch only adds to `loopd branches` and to the refs
every git command reads. Branches of runs that did not land go with the run after
`retain_days` (housekeeping.py).

One `for-each-ref --merged` per loop finds the contained branches, so a repository with
thousands of run branches costs one git command, and only their runs' records are read.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from daemon.git.safe import GitError
from daemon.git.userrepo import LedgerWriter, UserRepo
from daemon.landing.branches import HandMerges
from daemon.state.eventtypes import Event
from daemon.state.ledger import ledger_of
from daemon.state.store import StateStore


def contained(user: UserRepo, target: str, loop: str) -> list[tuple[str, str]]:
    """(branch, tip) of `loop`'s run branches that `target` contains."""
    out = user.git.out(
        "for-each-ref",
        f"--merged=refs/heads/{target}",
        "--format=%(refname) %(objectname)",
        f"refs/heads/loopd/{loop}/",
    )
    pairs = []
    for line in out.splitlines():
        ref, _, tip = line.partition(" ")
        pairs.append((ref.removeprefix("refs/heads/"), tip))
    return pairs


def delete_landed_branches(
    store: StateStore, loops: dict[str, tuple[Path, str]], now: datetime
) -> list[str]:
    """Delete the run branches of each loop (name -> (repository, target)) that the target
    contains, a hand merge recorded as landed first; never a live run's. The ones deleted."""
    hands = HandMerges(store, now)  # each repository's branches read once for hand merges
    live = hands.live
    deleted: list[str] = []
    for loop, (repo, target) in sorted(loops.items()):
        if not target or not repo.is_dir():
            continue
        try:
            user = UserRepo.locate(repo)
            pairs = contained(user, target, loop)
        except (GitError, OSError):
            continue
        if pairs:
            user.git.run("worktree", "prune", check=False)  # a removed tree may still claim it
        for branch, _tip in pairs:
            run_id = branch.rsplit("/", 1)[-1]
            if run_id in live:
                continue
            if _delete(hands, user, loop, run_id, branch, target):
                deleted.append(branch)
    return deleted


def _delete(
    hands: HandMerges, user: UserRepo, loop: str, run_id: str, branch: str, target: str
) -> bool:
    store, now = hands.store, hands.now
    try:
        run = store.load_run(run_id)
    except Exception:  # noqa: BLE001 - a branch without a readable record is left for a person
        return False
    if run.outcome is None:
        return False  # not finished: its work may still change
    if run.outcome == "succeeded":
        hands.notice(run)  # merged by hand: the record says so before it goes
    writer = LedgerWriter(ledger_of(store.root), lambda: now, run_id)
    try:
        if not user.delete_ref(writer, f"refs/heads/{branch}", f"contained in {target}"):
            return False
    except GitError as exc:
        store.events.append(
            Event.BRANCH_DELETE_FAILED,
            now,
            loop=loop,
            run=run_id,
            branch=branch,
            error=str(exc)[:300],
        )
        return False
    if run.branch == branch:
        run.branch_gone(branch)
        store.save_run(run)
    store.events.append(
        Event.BRANCH_DELETED, now, loop=loop, run=run_id, branch=branch, why=f"{target} contains it"
    )
    return True
