"""Whether a target holds a run's change already: it contains the run's branch, or has every
file the branch changed as the branch has it (another run made the same change and landed).

Plumbing only (no textconv, no external diff, no merge driver runs), and no pydantic: the read
commands' plain path (cli/plainmerge.py) asks it too.
"""

from __future__ import annotations

import string

from daemon.git.safe import Git, GitError

_HEX = set(string.hexdigits)
Triple = tuple[str, str, str]  # (base, tip, target)


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


def _trees(git: Git, commits: set[str]) -> dict[str, str]:
    """The tree of each of `commits` that is a commit in the repository (one cat-file)."""
    ordered = sorted(commits)
    query = "".join(f"{c}^{{tree}}\n" for c in ordered).encode()
    proc = git.run("cat-file", "--batch-check=%(objectname)", input=query, check=False)
    lines = proc.stdout.decode("ascii", "replace").splitlines()
    return {
        commit: line
        for commit, line in zip(ordered, lines, strict=False)
        if line and set(line) <= _HEX  # else "X^{tree} missing"
    }


def held_many(git: Git, runs: list[Triple]) -> set[Triple] | None:
    """The (base, tip, target) triples whose target holds the change from `base` to `tip`
    (`holds`' question for many runs at once, from their base: one `diff-tree --stdin`, so a
    listing of thousands of runs starts two git commands); None when git could not say."""
    if not runs:
        return set()
    try:
        trees = _trees(git, {c for triple in runs for c in triple})
        known = [t for t in runs if all(c in trees for c in t)]
        pairs = {p for b, t, g in known for p in ((trees[b], trees[t]), (trees[t], trees[g]))}
        if not pairs:
            return set()
        query = "".join(f"{a} {b}\n" for a, b in sorted(pairs)).encode()
        argv = ("diff-tree", "--stdin", "-r", "--no-renames", "--name-only")
        proc = git.run(*argv, input=query, check=False)
    except GitError:
        return None
    if proc.returncode != 0:
        return None
    paths: dict[tuple[str, str], set[str]] = {pair: set() for pair in pairs}
    current: set[str] | None = None
    for line in proc.stdout.decode("utf-8", "surrogateescape").splitlines():
        a, _, b = line.partition(" ")
        if (a, b) in paths:  # "TREE TREE": the pair whose paths follow
            current = paths[(a, b)]
        elif current is not None:
            current.add(line)
    out = set()
    for base, tip, target in known:
        changed = paths[(trees[base], trees[tip])]
        if changed and not changed & paths[(trees[tip], trees[target])]:
            out.add((base, tip, target))
    return out
