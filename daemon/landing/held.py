"""Whether a target holds a run's change already: it contains the run's branch, or has every
file the branch changed as the branch has it (another run made the same change and landed).

Plumbing only (no textconv, no external diff, no merge driver runs), and no pydantic: the read
commands' plain path (cli/plainmerge.py) asks it too.
"""

from __future__ import annotations

from daemon.git.safe import Git


def _changed(git: Git, a: str, b: str) -> set[str]:
    """The paths whose content or mode differs between two commits (plumbing: no textconv,
    no external diff, no merge driver runs)."""
    out = git.run("diff-tree", "-r", "--no-renames", "--name-only", "-z", a, b).stdout
    return {p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p}


def holds(git: Git, tip: str, target_tip: str) -> bool:
    """Whether `target_tip` holds the change of the run's branch at `tip` already: it contains
    the branch, or every file the branch changed since their merge base is in the target as
    the branch has it (another run made the same change, and it landed)."""
    contained = git.run("merge-base", "--is-ancestor", tip, target_tip, check=False)
    if contained.returncode == 0:
        return True
    since = git.out("merge-base", tip, target_tip, check=False)
    if not since:
        return False
    changed = _changed(git, since, tip)
    return bool(changed) and not changed & _changed(git, tip, target_tip)
