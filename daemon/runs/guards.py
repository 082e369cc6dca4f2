"""What an attempt may not do: change protected paths, or move refs other than its branch.

Both checks run after loopd has committed what the agent left. Protected paths are compared
between the run's base commit and the attempt's commit and, when changed, put back as they
were at the base (a loopd commit) before the next attempt. Refs are compared between a
snapshot taken before the attempt and after it, in the user's repository (a worktree shares
refs with it); a moved ref is put back, and the commit it had moved to is kept under
`refs/loopd/displaced/` so that nothing (an agent's work, or a person's own commit made
during the attempt, which looks the same) is lost.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from daemon.globs import matching_paths
from daemon.runs.git import Git

DISPLACED_PREFIX = "refs/loopd/displaced"
# loopd's own namespaces: other runs make and prune `loopd/*` branches while an attempt runs.
IGNORED_REF_PREFIXES = ("refs/heads/loopd/", "refs/loopd/")
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
    ignore_prefixes: Sequence[str] = IGNORED_REF_PREFIXES,
) -> list[str]:
    """Refs other than `refs/heads/OWN_BRANCH` that moved, appeared or vanished, sorted."""
    own = own_branch if own_branch.startswith("refs/") else f"refs/heads/{own_branch}"
    after = git.refs()
    moved = []
    for ref in set(before) | set(after):
        if ref == own or ref.startswith(tuple(ignore_prefixes)):
            continue
        if before.get(ref) != after.get(ref):
            moved.append(ref)
    return sorted(moved)


def restore_refs(
    git: Git, before: Mapping[str, str], moved: Iterable[str], keep_as: str = ""
) -> list[str]:
    """Put each moved ref back where `before` had it (deleting those that appeared).

    The commit a ref had moved to is kept as `refs/loopd/displaced/KEEP_AS/REF` when
    `keep_as` (the run id) is given. Returns a description of each ref put back.
    """
    now = git.refs()
    done = []
    for ref in sorted(set(moved)):
        current = now.get(ref)
        if current and keep_as:
            keep = f"{DISPLACED_PREFIX}/{keep_as}/{ref.removeprefix('refs/')}"
            git.run("update-ref", "--no-deref", keep, current)
        if ref in before:
            git.run("update-ref", "--no-deref", ref, before[ref], *([current] if current else []))
            done.append(f"{ref}: {(current or 'deleted')[:12]} -> {before[ref][:12]}")
        elif current:
            git.run("update-ref", "--no-deref", "-d", ref, current)
            done.append(f"{ref}: {current[:12]} -> deleted")
    return done
