"""What an attempt may not do: change protected paths, or move refs other than its branch.

Protected paths are compared between the run's base commit and the attempt's commit and,
when changed, put back as they were at the base (a loopd commit) before the next attempt.
Refs of the user's repository are compared between a snapshot taken before the attempt and
after it. A move that loopd made itself is in the ref ledger; any other move is reported and
left where it is: it may be the person's own commit, and nothing is ever rewound. No ref is
trusted for looking like a person's work, loopd's own `loopd/*` branches included.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from daemon.git.safe import Git
from daemon.globs import matching_paths

RESTORE_MESSAGE = "loopd: restore protected paths"


def changed_paths(git: Git, before: str, after: str) -> list[str]:
    """Paths that differ between two commits; a rename counts as both of its paths."""
    out = git.run(
        "diff", "--no-ext-diff", "--no-textconv", "--no-renames", "--name-only", "-z",
        before, after, "--",
    ).stdout.decode("utf-8", "surrogateescape")  # fmt: skip
    return [p for p in out.split("\0") if p]


def protect_violations(git: Git, before: str, after: str, globs: Sequence[str]) -> list[str]:
    """The changed paths between `before` and `after` that `globs` protect, sorted."""
    if not globs:
        return []
    return sorted(matching_paths(globs, changed_paths(git, before, after)))


def restore_paths(git: Git, commit: str, paths: Iterable[str]) -> str | None:
    """Put `paths` back as they are in `commit` (deleting those it lacks) and commit as loopd.

    Only these paths are staged and committed; the new commit, or None when nothing changed.
    """
    paths = sorted(set(paths))
    if not paths:
        return None
    present = git.run(
        "--literal-pathspecs", "ls-tree", "-r", "-z", "--name-only", commit, "--", *paths
    ).stdout.decode("utf-8", "surrogateescape")
    in_commit = [p for p in present.split("\0") if p]
    absent = sorted(set(paths) - set(in_commit))
    if in_commit:
        git.run("--literal-pathspecs", "checkout", "--no-overlay", commit, "--", *in_commit)
    if absent:
        git.run("--literal-pathspecs", "rm", "-q", "-r", "-f", "--ignore-unmatch", "--", *absent)
    if git.run("diff", "--cached", "--quiet", check=False).returncode == 0:
        return None
    git.run("commit", "--no-verify", "--no-gpg-sign", "-q", "-m", RESTORE_MESSAGE)
    return git.out("rev-parse", "HEAD")


def snapshot_refs(git: Git) -> dict[str, str]:
    """Every ref of the repository and the object it names."""
    return git.refs()


def check_refs(
    git: Git,
    before: Mapping[str, str],
    own_branch: str,
    explained: Mapping[str, set[str]] | None = None,
) -> list[str]:
    """Refs other than `refs/heads/OWN_BRANCH` that moved, appeared or vanished, sorted.

    `explained` ({ref: values loopd set it to}, from the ref ledger) leaves out the moves
    loopd made itself: a ref now at a value loopd gave it.
    """
    own = own_branch if own_branch.startswith("refs/") else f"refs/heads/{own_branch}"
    after = git.refs()
    explained = explained or {}
    moved = []
    for ref in set(before) | set(after):
        if ref == own or before.get(ref) == after.get(ref):
            continue
        if after.get(ref, "") in explained.get(ref, ()):
            continue
        moved.append(ref)
    return sorted(moved)
