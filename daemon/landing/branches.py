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
from typing import TYPE_CHECKING, Any

from daemon.git.safe import GitError
from daemon.git.userrepo import LedgerWriter, UserRepo
from daemon.landing.held import held_many, holds
from daemon.landing.refbatch import HEADS, RepoRefs, count_lines, read_refs
from daemon.people.landstate import landing_state
from daemon.people.since import run_ids_since
from daemon.plain.landing import ALREADY, may_have_landed
from daemon.state.background import Background
from daemon.state.eventtypes import Event
from daemon.state.ledger import ledger_of
from daemon.state.records import RunRecord
from daemon.state.runindex import IndexedRun, RunIndex
from daemon.state.store import StateStore

if TYPE_CHECKING:  # the listing never needs a run's journal: its import costs 10 ms
    from daemon.runparts.journal import RunJournal

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


def _merged_commit(run: RunRecord, refs: RepoRefs | None) -> str:
    """The target's commit when it contains the run's branch (its work landed), else ""."""
    if refs is None:
        return ""
    tip = refs.tips.get(HEADS + run.branch, "") if run.branch else ""
    target = refs.tips.get(HEADS + run.target, "") if run.target else ""
    if not tip or not target or tip == run.base_commit:
        return ""  # a branch that holds nothing of the run's is not its work landed
    return target if HEADS + run.branch in refs.merged_into(target) else ""


def _record_by_hand(
    store: StateStore, run: RunRecord, commit: str, now: datetime, how: str = "by hand"
) -> None:
    run.landed, run.landed_as, run.landed_how, run.landing = True, commit, how, ""
    store.save_run(run)
    store.events.append(
        Event.LANDED,
        now,
        loop=run.loop,
        run=run.id,
        land=how,
        target=run.target,
        commit=commit,
    )


class HandMerges:
    """Notices runs whose branch a person merged by hand (its tip is on the target) and
    records them landed "by hand"; each repository's branches are read once."""

    def __init__(self, store: StateStore, now: datetime) -> None:
        self.store = store
        self.now = now
        self.live = set(store.live_runs())
        self._refs: dict[str, RepoRefs | None] = {}
        self._held: dict[str, str] = {}  # run id -> the target's commit that holds its change

    def refs(self, repo: str) -> RepoRefs | None:
        if repo not in self._refs:
            self._refs[repo] = read_refs(Path(repo))
        return self._refs[repo]

    def known(self, repo: str, refs: RepoRefs | None) -> RepoRefs | None:
        """`refs`, read for `repo`, are what the hand merges there are checked against."""
        self._refs.setdefault(repo, refs)
        return self._refs[repo]

    def merged(self, run: RunRecord | IndexedRun) -> str:
        """The target's commit when `run` may have landed and its target contains its branch."""
        if not may_have_landed(run, self.live):
            return ""
        return _merged_commit(run, self.refs(run.repo))

    def _held_candidate(
        self, run: RunRecord | IndexedRun, refs: RepoRefs | None
    ) -> tuple[str, str, str] | None:
        """(base, tip, target) of a run whose target may hold its change: succeeded, not
        landed, its target moved since its base (a target still at the base holds nothing
        of it), its branch not contained in it (that is a merge by hand)."""
        if refs is None or run.outcome != "succeeded" or not may_have_landed(run, self.live):
            return None
        tip, target = refs.tip(run.branch), refs.tip(run.target)
        if not tip or not target or run.base_commit in ("", tip, target):
            return None
        return run.base_commit, tip, target

    def ask_held(self, refs: RepoRefs, runs: list[RunRecord | IndexedRun], index: RunIndex) -> None:
        """Whether the targets hold the changes of `runs` (records of one repository): kept
        in the run index, asked of git at once for the runs it has no answer for (their
        branch or target moved); `held` answers from it."""
        todo = {}
        for run in runs:
            found = self._held_candidate(run, refs)
            if run.id in self._held or found is None:
                continue
            known = index.held(run.id, *found)
            if known is None:
                todo[run.id] = found
            else:
                self._held[run.id] = found[2] if known else ""
        held = held_many(refs.user.git, list(todo.values()))
        for run_id, triple in todo.items():
            self._held[run_id] = triple[2] if held and triple in held else ""
            if held is not None:  # git's answer, kept; none is asked again next time
                index.set_held(run_id, *triple, triple in held)

    def held(self, run: RunRecord | IndexedRun) -> str:
        """The target's commit when it holds the change of `run`'s branch without containing
        the branch (another run, or a person, landed the same change), else ""."""
        if run.id not in self._held:
            refs = self.refs(run.repo) if may_have_landed(run, self.live) else None
            found = self._held_candidate(run, refs)
            self._held[run.id] = ""
            if refs is not None and found is not None:
                try:
                    self._held[run.id] = found[2] if holds(refs.user.git, *found[1:]) else ""
                except GitError:
                    pass
        return self._held[run.id]

    def notice(self, run: RunRecord) -> bool:
        """Record `run` (a whole record) landed by hand, or already landed, when it was; True
        when recorded now."""
        commit = self.merged(run)
        if commit:
            _record_by_hand(self.store, run, commit, self.now)
            return True
        commit = self.held(run)
        if commit:
            _record_by_hand(self.store, run, commit, self.now, ALREADY)
        return bool(commit)

    def notice_partial(self, run: RunRecord | IndexedRun) -> RunRecord | None:
        """The same for a record from the run index: the whole record, when it was recorded."""
        if not (self.merged(run) or self.held(run)):
            return None
        try:
            whole = self.store.load_run(run.id)
        except Exception:  # noqa: BLE001 - a record that cannot be read cannot be updated
            return None
        return whole if self.notice(whole) else None


def notice_landed(store: StateStore, run: RunRecord, now: datetime) -> bool:
    """Record a run whose branch a person merged by hand (its tip is on the target) as
    landed "by hand"; True when this call recorded it."""
    return HandMerges(store, now).notice(run)


def notice_hand_merges(store: StateStore, since: datetime, now: datetime) -> list[str]:
    """Record as landed "by hand" the runs since `since` whose branch a person merged; their
    ids."""
    hands = HandMerges(store, now)
    index = RunIndex(store)
    found = []
    for run_id, run in index.records(run_ids_since(store, since)).items():
        if run.outcome == "succeeded" and hands.notice_partial(run) is not None:
            found.append(run_id)
    index.save(store.run_ids())
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
    store: StateStore,
    repos: dict[str, Path],
    now: datetime,
    loop: str = "",
    lands: dict[str, str] | None = None,
    others: list[RunBranch] | None = None,
) -> list[RunBranch]:
    """The run branches of this home's runs in its loops' repositories (or of `loop`); a
    branch a person merged by hand is recorded landed as of `now`. A branch is this home's
    when its run has a record under this home's `state/runs/` or is live here: another home's
    (every home's example loop works on the same repository) or a run unknown here goes to
    `others` instead. `lands`: each loop's `land` today, which a run not landed is told by."""
    hands = HandMerges(store, now)
    if loop in repos:
        repos = {loop: repos[loop]}  # its branches are in its repository alone
    where = {name: str(path) for name, path in repos.items()}
    # The order of paths, not of strings. Every repository's branches are listed at once,
    # while the run index is read.
    order = [str(path) for path in sorted(set(repos.values())) if path.is_dir()]
    listed = {repo: Background(read_refs, Path(repo)) for repo in order}
    index = RunIndex(store)
    found = []
    for repo in order:
        refs = hands.known(repo, listed[repo].result())  # for the listing and the hand merges
        if refs is not None:
            rows = _rows(refs, where, repo, loop)
            _ask_ahead(index, refs, rows)
            found.append((refs, rows))
    out: list[RunBranch] = []
    for refs, rows in found:
        described = _describe(hands, index, refs, rows, lands or {})
        out += [row for row in described if row.outcome or row.live]
        if others is not None:
            others += [row for row in described if not (row.outcome or row.live)]
    index.save(store.run_ids())
    return out


def _rows(refs: RepoRefs, where: dict[str, str], repo: str, loop: str) -> list[RunBranch]:
    """The run branches in `repo` of the loops whose repository it is (or of `loop`)."""
    rows = []
    for ref, tip in refs.tips.items():
        if not ref.startswith(PREFIX):
            continue
        parts = ref[len(HEADS) :].split("/")
        if len(parts) != 3 or (loop and parts[1] != loop):
            continue
        if where.get(parts[1], repo) != repo:
            continue  # another loop's repository is where its branches are
        rows.append(RunBranch(repo, ref[len(HEADS) :], tip, parts[1], parts[2]))
    return rows


def _ask_ahead(index: RunIndex, refs: RepoRefs, rows: list[RunBranch]) -> None:
    """Start the git questions the rows will need while the others are described: which
    branches the targets of runs that may have landed contain (as the index last saw those
    runs: a guess, a question it misses is asked when needed), and the diff algorithm."""
    if not rows:
        return
    for target in index.hand_merge_targets([row.run for row in rows]):
        commit = refs.tip(target)
        if commit:
            refs.ask_merged(commit)
    refs.ask_diff_algorithm()


def _describe(
    hands: HandMerges,
    index: RunIndex,
    refs: RepoRefs,
    rows: list[RunBranch],
    lands: dict[str, str],
) -> list[RunBranch]:
    """The rows with their runs' outcome, landing state and net +/- lines."""
    records = index.records([row.run for row in rows])
    live = hands.live
    ended = [r for r in records.values() if r.outcome is not None and not r.landed]
    hands.ask_held(refs, [r for r in ended if not hands.merged(r)], index)  # one git question
    based: list[tuple[RunBranch, str]] = []
    for row in rows:
        row.live = row.run in live
        record: Any = records.get(row.run)
        if record is None:
            continue
        if record.outcome is not None and not record.landed:
            record = hands.notice_partial(record) or record  # a live run is never landed
        row.outcome = record.outcome or f"({record.phase})"
        row.finished = record.finished
        row.landed = record.landed
        row.landing = landing_state(record, lands.get(row.loop, "")).line()
        if record.base_commit:
            based.append((row, record.base_commit))
    _count_lines(index, refs, based)
    return rows


def _count_lines(index: RunIndex, refs: RepoRefs, based: list[tuple[RunBranch, str]]) -> None:
    """Each row's net +/- lines from its run's base: kept in the run index, counted by git
    only for a branch not counted before (a new run, a moved branch, another algorithm)."""
    if not based:
        return
    algorithm = refs.diff_algorithm()
    todo = []
    for row, base in based:
        known = index.lines(row.run, base, row.tip, algorithm)
        if known is None:
            todo.append((row, base))
        else:
            row.added, row.removed = known
    if not todo:
        return
    pairs = {(base, row.tip) for row, base in todo}
    counted, sure = count_lines(refs, pairs, algorithm)
    for row, base in todo:
        pair = (base, row.tip)
        row.added, row.removed = counted.get(pair, (0, 0))
        if pair in sure:  # else (0, 0) or a part, and asked again next time
            index.set_lines(row.run, base, row.tip, algorithm, counted[pair])


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
