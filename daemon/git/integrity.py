"""What loopd does when an attempt's work is taken, whatever the isolation.

`commit_work` runs after every agent session that loopd commits (and when an attempt ends
in an error, a cancel or a crash):
1. the user's repository first: its `config`, `hooks/` and `info/` are put back (each change
   a violation) before any of loopd's git touches it, when the agent could reach it;
2. the agent's HEAD and its copy of the run's branch are read as data (a clone's commits by
   a checked fetch); commits that descend from the base are taken onto the run's branch,
   whether HEAD was on it, detached or on another branch; others are kept under
   `refs/loopd/kept/RUN_ID/` and fail the attempt;
3. the whole tree is staged in loopd's own index (skip-worktree and assume-unchanged
   cleared, loopd's own exclude list) and committed on top;
4. the run's branch is fetched into the user's repository (recorded in the ref ledger) and
   the agent's git is put back on it at that commit;
5. the user's refs are compared with the snapshot: a move loopd did not make is a violation
   and stays where it is.
"""

from __future__ import annotations

from daemon.git.agent import read_heads, rebuild_view
from daemon.git.guards import check_refs
from daemon.git.own import AgentHeads, OwnGit
from daemon.git.repofiles import load_snapshot, restore_files, save_snapshot, take_snapshot
from daemon.git.runlog import RunLog
from daemon.git.safe import GIT_IDENTITY
from daemon.git.setupmade import setup_paths
from daemon.git.tree import RunTree
from daemon.git.userrepo import LedgerWriter
from daemon.sizes import human_size, on_disk
from daemon.state.eventtypes import Event
from daemon.state.ledger import ledger_of
from daemon.state.records import WHOLE_TREE, AttemptRecord, Violation

KEPT_PREFIX = "refs/loopd/kept"
GUARD_FILE = "repo-guard.json"


def ledger_writer(journal: RunLog) -> LedgerWriter:
    services = journal.services
    return LedgerWriter(ledger_of(services.store.root), services.clock, journal.run.id)


class RepoGuard:
    """The ref, config, hooks and info guards of the user's repository for one run."""

    def __init__(self, journal: RunLog, tree: RunTree) -> None:
        self.journal = journal
        self.tree = tree
        self.path = journal.services.store.run_dir(journal.run.id) / GUARD_FILE

    def baseline(self) -> None:
        """Snapshot the user's refs and files now (before an attempt's agent starts).

        The refs go into the run's record, which the caller saves before the agent starts.
        """
        run, user = self.journal.run, self.tree.user
        save_snapshot(self.path, take_snapshot(user.common))
        run.refs_before = user.refs()
        run.refs_at = self.journal.now()

    def check_files(self) -> list[Violation]:
        """Put back changed config, hooks and info files; one violation each."""
        snapshot = load_snapshot(self.path)
        if snapshot is None:  # a run from before these guards: start watching now
            save_snapshot(self.path, take_snapshot(self.tree.user.common))
            return []
        violations = restore_files(self.tree.user.common, snapshot)
        if violations:
            self.journal.event(
                Event.REPO_RESTORED, files=[v.target for v in violations], repo=str(self.tree.repo)
            )
        return violations

    def check_refs(self) -> list[Violation]:
        """Refs that moved since the snapshot and that loopd did not move; they stay."""
        run, user = self.journal.run, self.tree.user
        if run.refs_at is None:  # no snapshot yet: take one, nothing to compare
            run.refs_before = user.refs()
            run.refs_at = self.journal.now()
            self.journal.save()
            return []
        explained = ledger_of(self.journal.services.store.root).explains(user.key, run.refs_at)
        now = self.journal.now()
        moved = check_refs(user.git, run.refs_before, self.tree.branch, explained)
        after = user.refs()
        violations = []
        for ref in moved:
            was, is_now = run.refs_before.get(ref, ""), after.get(ref, "")
            self.journal.event(Event.REF_MOVED, ref=ref, was=was, to=is_now)
            detail = f"{(was or 'absent')[:12]} -> {(is_now or 'deleted')[:12]}; left where it is"
            violations.append(Violation(kind="ref_moved", target=ref, detail=detail))
        # What was reported is reported once: the next check starts from here.
        run.refs_before = after
        run.refs_at = now
        self.journal.save()
        return violations

    def check(self) -> list[Violation]:
        return self.check_files() + self.check_refs()


def guard_of(journal: RunLog, tree: RunTree) -> RepoGuard | None:
    """The run's repository guard, None when the agent cannot write the user's repository."""
    return RepoGuard(journal, tree) if tree.guarded else None


def add_violations(attempt: AttemptRecord | None, found: list[Violation]) -> None:
    if attempt is None:
        return
    for violation in found:
        if violation not in attempt.violations:
            attempt.violations.append(violation)


def choose_parents(
    own: OwnGit, tip: str, base: str, candidates: list[str]
) -> tuple[list[str], list[str], list[str]]:
    """The parents of loopd's commit, the agent commits taken, and those kept aside.

    A candidate already in the branch adds nothing; one that descends from the base is
    taken (a fast-forward when the branch is its ancestor, else a second parent); one that
    does not descend from the base is kept aside.
    """
    parents, taken, kept = [tip], [], []
    for commit in dict.fromkeys(c for c in candidates if c):
        if any(own.is_ancestor(commit, p) for p in parents):
            continue
        if not own.is_ancestor(base, commit):
            kept.append(commit)
            continue
        parents = [p for p in parents if not own.is_ancestor(p, commit)] + [commit]
        taken.append(commit)
    return parents, taken, kept


def commit_work(
    journal: RunLog,
    tree: RunTree,
    message: str,
    attempt: AttemptRecord | None = None,
    *,
    guard_refs: bool = True,
) -> str:
    """Take what the agent left onto the run's branch (see the module); returns the new head.

    Violations found go to `attempt`. `guard_refs` False leaves the ref comparison to a
    later call (a commit in the middle of an attempt).
    """
    run = journal.run
    guard = guard_of(journal, tree)
    violations: list[Violation] = []
    if guard is not None:
        violations += guard.check_files()
    own = tree.own
    if own.remove_stale_lock():
        journal.event(Event.STALE_LOCK_REMOVED, path=str(own.path / "index.lock"))
    heads = read_heads(tree.isolation, tree.path, tree.agent_dir, tree.branch, own, tree.user)
    if heads.problem:
        journal.event(Event.AGENT_GIT_IGNORED, problem=heads.problem)
        violations.append(Violation(kind="git_dir", target=".git", detail=heads.problem))
    cleared = own.clear_hiding_flags()
    if cleared:
        journal.event(Event.INDEX_FLAGS_CLEARED, paths=cleared[:50], count=len(cleared))
    staged = own.stage_all(setup_paths(run, tree.path))
    tip = own.tip()
    parents, taken, kept = choose_parents(own, tip, run.base_commit, [heads.branch, heads.head])
    _report_heads(journal, tree, heads, taken)
    if len(parents) == 1 and own.tree_of(parents[0]) == staged:
        new = parents[0]
    else:
        new = own.commit_tree(staged, parents, message)
    if new != tip:
        own.set_tip(new, tip)
    kept_refs = _keep_commits(journal, own, kept, violations)
    limits = journal.services.config.limits
    large = too_large(own, new, run.base_commit, limits.max_file_size)
    large += tree_too_large(own, new, run.base_commit, limits.max_tree)
    if large:
        # Kept out of the person's repository: the run's branch stays where it was.
        if new != tip:
            own.set_tip(tip, new)
        violations += large
        journal.event(Event.TOO_LARGE, files=[v.model_dump() for v in large])
        new = tip
    else:
        publish(journal, tree, new, kept_refs)
    if guard is not None and guard_refs:
        violations += guard.check_refs()
    if violations:
        journal.event(Event.VIOLATIONS_FOUND, violations=[v.model_dump() for v in violations])
    add_violations(attempt, violations)
    return new


def _keep_commits(
    journal: RunLog, own: OwnGit, kept: list[str], violations: list[Violation]
) -> list[tuple[str, str]]:
    """The agent's commits off the branch, each kept under a ref of the run (a violation);
    the (ref, commit) pairs."""
    run = journal.run
    kept_refs = []
    for commit in kept:
        ref = f"{KEPT_PREFIX}/{run.id}/{commit[:12]}"
        own.bare.run("update-ref", ref, commit)
        kept_refs.append((ref, commit))
        violations.append(
            Violation(kind="detached_head", target=commit[:12], detail=f"kept as {ref}")
        )
        journal.event(Event.AGENT_COMMITS_KEPT, commit=commit, ref=ref)
    return kept_refs


def too_large(own: OwnGit, new: str, base: str, limit: int) -> list[Violation]:
    """The files of `new`'s history since `base` larger than `limit` bytes, as violations."""
    listed = own.bare.run("rev-list", "--objects", new, "--not", base, check=False)
    if listed.returncode != 0 or not listed.stdout:
        return []
    checked = own.bare.run(
        "cat-file",
        "--batch-check=%(objecttype) %(objectsize) %(rest)",
        input=listed.stdout,
        check=False,
    )
    found: list[Violation] = []
    for line in checked.stdout.decode("utf-8", "replace").splitlines():
        kind, _, rest = line.partition(" ")
        size, _, path = rest.partition(" ")
        if kind == "blob" and size.isdigit() and int(size) > limit:
            detail = f"{int(size) >> 20} MB, over [limits] max_file_size"
            found.append(Violation(kind="too_large", target=path or "?", detail=detail))
    return found[:20]


def _tree_count(own: OwnGit, commit: str) -> tuple[int, int]:
    """Entries of `commit`'s tree and what they count (each at least 4 KiB: `sizes.on_disk`)."""
    listed = own.bare.run("ls-tree", "-r", "-t", "-l", "-z", "--full-tree", commit, check=False)
    entries = total = 0
    for entry in listed.stdout.split(b"\0") if listed.returncode == 0 else []:
        if not entry:
            continue
        words = entry.partition(b"\t")[0].split()
        size = words[3] if len(words) == 4 else b"-"
        entries += 1
        total += on_disk(int(size) if size.isdigit() else 0)
    return entries, total


def tree_too_large(own: OwnGit, new: str, base: str, limit: int) -> list[Violation]:
    """The tree of `new` as a violation when it is over `[limits] max_tree` (and larger than
    the base's: a repository already over it may still change), 100,000 empty files too."""
    entries, total = _tree_count(own, new)
    if total <= limit or (base and total <= _tree_count(own, base)[1]):
        return []
    detail = f"{entries} entries, {human_size(total)} as counted, over [limits] max_tree"
    return [Violation(kind="too_large", target=WHOLE_TREE, detail=detail)]


def _report_heads(journal: RunLog, tree: RunTree, heads: AgentHeads, taken: list[str]) -> None:
    own_ref = f"refs/heads/{tree.branch}"
    if heads.head and heads.head in taken and heads.head_ref != own_ref:
        journal.event(
            Event.DETACHED_HEAD_TAKEN, commit=heads.head, head=heads.head_ref or "detached"
        )


def relabel(journal: RunLog, tree: RunTree, head: str, message: str) -> str:
    """Give loopd's commit `head`, the run's tip, a new message (same files and parents);
    the commit the branch then names. An agent's own commit keeps its words."""
    own = tree.own
    if not head or own.tip() != head:
        return head
    found = own.bare.out("log", "-1", "--format=%ae%x00%B", head)
    email, _, old = found.partition("\0")
    if email != GIT_IDENTITY[1] or old.strip() == message.strip():
        return head
    parents = own.bare.out("rev-list", "--parents", "-n", "1", head).split()[1:]
    new = own.commit_tree(own.tree_of(head), parents, message)
    own.set_tip(new, head)
    publish(journal, tree, new)
    return new


def publish(
    journal: RunLog,
    tree: RunTree,
    head: str,
    kept: list[tuple[str, str]] | None = None,
) -> None:
    """Fetch the run's branch (and kept commits) into the user's repository; rebuild the
    agent's view on it."""
    user, own = tree.user, tree.own
    writer = ledger_writer(journal)
    branch_ref = f"refs/heads/{tree.branch}"
    user.take_objects(own.path, [branch_ref, *(ref for ref, _ in kept or [])])
    for ref, commit in kept or []:
        user.set_ref(writer, ref, commit, "agent commits kept")
    user.set_ref(writer, branch_ref, head, "run branch")
    for lock in rebuild_view(
        tree.isolation, tree.path, tree.agent_dir, tree.branch, own, user, head
    ):
        journal.event(Event.STALE_LOCK_REMOVED, path=lock)
