"""A landing merge: the target merged into the run's branch in a fresh tree of loopd's own.

Never in the agent's tree and never in the person's checkout: a folder beside the run's tree
(`RUN_ID.land`) with loopd's own git directory (`RUN_ID.land.git`, its config written by
loopd, so no merge driver, filter or hook of the repository runs). The merge is computed by
`git merge-tree --write-tree`; the result is checked out there, the loop's `setup` runs and
then `done_when`, in the run's sandbox. Only when they pass does the run's branch move to the
merge (recorded in the ref ledger) for the target to be fast-forwarded to it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from daemon.config import LoopConfig
from daemon.git.messages import merge_message
from daemon.git.own import OwnGit, remove_path
from daemon.git.safe import Git
from daemon.git.userrepo import LedgerWriter, UserRepo
from daemon.runparts.checks import run_checks
from daemon.runparts.confinement import Confinement
from daemon.runparts.journal import RunJournal
from daemon.runparts.setup import run_setup
from daemon.runparts.stop import StopToken
from daemon.state.eventtypes import Event

LAND_CHECKS_LOG = "land-checks.log"
LAND_SETUP_LOG = "land-setup.log"
MERGE_BRANCH = "loopd-landing"
FINISH = "; finish it: "  # where a conflict's text says how to finish it


class MergeRefused(Exception):
    """The merge conflicts, or setup or the checks fail on it: the run does not land."""

    checks = False  # True: setup or the checks failed on what would land


@dataclass
class Conflict:
    """A landing's textual conflict: both sides, the files and hunks, the merge with markers."""

    tip: str  # the run's branch
    target: str
    target_tip: str
    tree: str  # the merge's tree, conflict markers in the conflicting files
    files: list[str]
    hunks: dict[str, list[str]] = field(default_factory=dict)  # path -> "3-7" spans
    theirs: list[str] = field(default_factory=list)  # target commits, "sha (run X)"
    text: str = ""  # the whole of it, for a person (conflict_text)


class MergeConflict(MergeRefused):
    """The run's branch and the target change the same lines: both sides named."""

    def __init__(self, conflict: Conflict) -> None:
        super().__init__(conflict.text)
        self.conflict = conflict


class ChecksRefused(MergeRefused):
    """Setup or the checks fail on the commit that would land."""

    checks = True


def _folders(journal: RunJournal) -> tuple[Path, Path]:
    run = journal.run
    root = journal.services.config.limits.worktrees_path / run.loop
    return root / f"{run.id}.land", root / f"{run.id}.land.git"


@contextmanager
def _landing_tree(journal: RunJournal, user: UserRepo, tip: str) -> Iterator[tuple[Path, OwnGit]]:
    """A fresh folder and git directory of loopd's own at `tip`, removed afterwards."""
    tree, own_dir = _folders(journal)

    def clear() -> None:
        for path in (tree, own_dir):
            if path.exists() or path.is_symlink():
                remove_path(path)

    clear()
    try:
        own = OwnGit.create(
            own_dir, tree, user.common, MERGE_BRANCH, tip, user.object_format,
            user.lfs_storage(),
        )  # fmt: skip
        yield tree, own
    finally:
        clear()


def merge_target(
    journal: RunJournal,
    cfg: LoopConfig,
    user: UserRepo,
    writer: LedgerWriter,
    tip: str,
    target: str,
    target_tip: str,
    squash: str = "",
) -> str:
    """Merge `target_tip` into the run's branch at `tip`; the merge commit once its checks
    pass (the run's branch then points at it). With a `squash` message, the merge's files
    are one commit on `target_tip` instead (the branch is left as it is). MergeRefused when
    it cannot land."""
    run = journal.run
    with _landing_tree(journal, user, tip) as (tree, own):
        merged = own.bare.run("merge-tree", "--write-tree", "-z", tip, target_tip, check=False)
        if merged.returncode == 1:
            files = _conflicts(merged.stdout)
            tree_oid = merged.stdout.split(b"\0", 1)[0].decode().strip()
            found = Conflict(tip, target, target_tip, tree_oid, files)
            found.text = conflict_text(journal, own.bare, found)
            raise MergeConflict(found)
        if merged.returncode != 0:
            err = merged.stderr.decode("utf-8", "replace").strip()[:300]
            raise MergeRefused(f"git merge-tree failed: {err}")
        tree_oid = merged.stdout.split(b"\0", 1)[0].decode().strip()
        tree.mkdir(parents=True)
        own.git.run("read-tree", "-u", "--reset", tree_oid)  # the merge's files, nothing else
        journal.event(Event.LANDING_MERGE, target=target, tree=tree_oid, target_commit=target_tip)
        _setup_and_check(journal, cfg, tree, own, f"the merge with {target}")
        if squash:
            final = own.commit_tree(tree_oid, [target_tip], squash)
        else:
            message = merge_message(run, target, "checks pass")
            final = own.commit_tree(tree_oid, [tip, target_tip], message)
        own.set_tip(final, tip)
        user.take_objects(own.path, [f"refs/heads/{MERGE_BRANCH}"])
        if not squash:  # a squash moves the run's branch once the target has moved to it
            user.set_ref(writer, f"refs/heads/{run.branch}", final, "landing merge")
        return final


def verify_tip(journal: RunJournal, cfg: LoopConfig, user: UserRepo, tip: str) -> None:
    """Setup and the checks on a fresh tree of `tip`, the very commit that will land, unless
    a clean check tree of this run already passed them on its files (`verified_tree`).
    MergeRefused when they fail."""
    run = journal.run
    tree_oid = user.git.out("rev-parse", "--verify", f"{tip}^{{tree}}")
    if not cfg.done_when or (run.verified_tree and run.verified_tree == tree_oid):
        return
    with _landing_tree(journal, user, tip) as (tree, own):
        tree.mkdir(parents=True)
        own.git.run("read-tree", "-u", "--reset", tree_oid)
        journal.event(Event.LANDING_VERIFY, commit=tip, tree=tree_oid)
        _setup_and_check(journal, cfg, tree, own, "the commit to land")
        run.verified_tree = tree_oid


def _setup_and_check(
    journal: RunJournal, cfg: LoopConfig, tree: Path, own: OwnGit, what: str
) -> None:
    """The loop's setup, then its checks, in a fresh landing tree; MergeRefused on failure."""
    run = journal.run
    stop = StopToken()
    if cfg.setup:
        setup = run_setup(journal, stop, tree, own, cfg, LAND_SETUP_LOG)
        if not setup.passed:
            raise ChecksRefused(
                f"setup fails on {what}: {setup.failure()} (state/runs/{run.id}/{LAND_SETUP_LOG})"
            )
    confinement = Confinement.for_run(journal.services, cfg, run, tree)
    log = journal.services.store.run_dir(run.id) / LAND_CHECKS_LOG
    checks = run_checks(
        cfg.done_when,
        tree,
        cfg.check_timeout.total_seconds(),
        confinement.checks_env(),
        log,
        stop,
        launcher=confinement.launch_check,
    )
    journal.event(
        Event.LANDING_CHECKS,
        passed=checks.passed,
        results=[{"command": r.command, "exit_code": r.exit_code} for r in checks.results],
    )
    if not checks.passed:
        raise ChecksRefused(
            f"the checks fail on {what} (state/runs/{run.id}/{LAND_CHECKS_LOG}); the branch is "
            "kept, nothing landed"
        )


def conflict_text(journal: RunJournal, git: Git, conflict: Conflict) -> str:
    """Both sides of a landing's conflict: the run and its commit, the target's commits
    (and the loopd runs they landed) that touched the files, the conflicting hunks' lines,
    and how to finish it. Fills in the conflict's hunks and target commits."""
    run, tip, target, target_tip = journal.run, conflict.tip, conflict.target, conflict.target_tip
    files = conflict.files
    base = git.out("merge-base", tip, target_tip, check=False).strip()
    shown = files[:5]
    if base and shown:
        log = git.out("log", "--format=%H %s", f"{base}..{target_tip}", "--", *shown, check=False)
        for line in log.splitlines()[:5]:
            sha, _, subject = line.partition(" ")
            found = _RUN_IN_SUBJECT.search(subject)
            conflict.theirs.append(sha[:12] + (f" (run {found.group(1)})" if found else ""))
    for path in files[:50]:
        conflict.hunks[path] = _hunk_spans(git, conflict.tree, path)
    hunks = [f"{path} {_said(conflict.hunks[path])}" for path in shown]
    theirs = conflict.theirs
    return (
        f"merging {target} into the run's branch conflicts in "
        + ("; ".join(hunks) or "some files")
        + (" and more" if len(files) > 5 else "")
        + f"; this run {run.id} at {tip[:12]} against {target} at {target_tip[:12]}"
        + (f", changed there by {', '.join(theirs)}" if theirs else "")
        + f"{FINISH}`git merge {target}` on {run.branch}, resolve, commit, then "
        f"`loopd land {run.id}`, or `loopd escalations resolve {run.id} --retry`"
    )


_RUN_IN_SUBJECT = re.compile(r"\(run ([0-9A-Za-z_.-]+)")


def _hunk_spans(git: Git, tree_oid: str, path: str) -> list[str]:
    """Where the conflict markers are in the merged file: `["3-7", "20-24"]`."""
    text = git.out("cat-file", "-p", f"{tree_oid}:{path}", check=False)
    return marker_spans(text)


def marker_spans(text: str) -> list[str]:
    """The line spans of the conflict markers in a file's text."""
    spans, start = [], 0
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("<<<<<<< "):
            start = n
        elif line.startswith(">>>>>>> ") and start:
            spans.append(f"{start}-{n}")
            start = 0
    return spans


def has_markers(text: str) -> bool:
    """Whether a file's text still holds a conflict marker line (either end of a hunk)."""
    return any(line.startswith(("<<<<<<< ", ">>>>>>> ")) for line in text.splitlines())


def _said(spans: list[str]) -> str:
    return f"(lines {', '.join(spans[:5])})" if spans else "(whole file)"


def _conflicts(out: bytes) -> list[str]:
    """The conflicted paths `git merge-tree --write-tree -z` lists after the tree."""
    parts = out.split(b"\0")
    files = []
    for part in parts[1:]:
        if not part:
            break  # the informational messages follow an empty entry
        fields = part.split(b"\t", 1)
        if len(fields) == 2:
            files.append(fields[1].decode("utf-8", "replace"))
    return sorted(set(files))
