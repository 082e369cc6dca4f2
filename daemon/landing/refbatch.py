"""What listings of many run branches ask git, asked once per repository rather than once per
branch: the branches and their tips, which of them a target contains, their net +/- lines.

A git command costs milliseconds to start; `loopd branches` at 10,000 branches cannot start
one per branch. Each answer here is what the per-branch command gave: `--merged` is
`merge-base --is-ancestor` for every branch at once, `diff-tree --stdin` on (base, tip) trees
is `git diff --numstat BASE TIP` for every pair at once.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from pathlib import Path

from daemon.git.safe import GitError
from daemon.git.userrepo import UserRepo
from daemon.state.background import Background

HEADS = "refs/heads/"
_HEX = set(string.hexdigits)
Pair = tuple[str, str]  # (base, tip)


@dataclass
class RepoRefs:
    """A repository's branches as one `for-each-ref` saw them."""

    user: UserRepo
    tips: dict[str, str]  # refname -> the object it names
    _merged: dict[str, set[str]] = field(default_factory=dict)
    _asked: dict[str, Background[set[str]]] = field(default_factory=dict)
    _algorithm: Background[str] | None = None

    def tip(self, branch: str) -> str:
        """The commit `refs/heads/BRANCH` names, "" when there is no such branch."""
        return self.tips.get(HEADS + branch, "") if branch else ""

    def ask_merged(self, commit: str) -> None:
        """Start asking which branches `commit` contains (merged_into answers)."""
        if commit not in self._merged and commit not in self._asked:
            self._asked[commit] = Background(self._merged_query, commit)

    def _merged_query(self, commit: str) -> set[str]:
        try:
            out = self.user.git.out(
                "for-each-ref", f"--merged={commit}", "--format=%(refname)", HEADS
            )
        except GitError:
            out = ""
        return set(out.splitlines())

    def merged_into(self, commit: str) -> set[str]:
        """The branches (refnames) whose tip `commit` contains."""
        if commit not in self._merged:
            asked = self._asked.pop(commit, None)
            found = asked.result() if asked is not None else self._merged_query(commit)
            self._merged[commit] = found
        return self._merged[commit]

    def ask_diff_algorithm(self) -> None:
        """Start reading the repository's `diff.algorithm` (diff_algorithm answers)."""
        if self._algorithm is None:
            self._algorithm = Background(self._algorithm_query)

    def _algorithm_query(self) -> str:
        try:
            return self.user.git.out("config", "--get", "diff.algorithm", check=False)
        except GitError:
            return ""

    def diff_algorithm(self) -> str:
        """The repository's `diff.algorithm` ("" when unset): `git diff` reads it, diff-tree
        not, and the lines it counts depend on it."""
        self.ask_diff_algorithm()
        assert self._algorithm is not None
        return self._algorithm.result()

    def contains(self, target: str, branch: str) -> bool:
        """Whether branch `target` contains branch `branch`'s tip."""
        commit = self.tip(target)
        return bool(commit) and HEADS + branch in self.merged_into(commit)


def read_refs(repo: Path) -> RepoRefs | None:
    """The branches of the repository at `repo`; None when it is no repository (any more)."""
    try:
        user = UserRepo.locate(repo)
        out = user.git.out("for-each-ref", "--format=%(objectname) %(refname)", HEADS)
    except (GitError, OSError):
        return None
    tips = {}
    for line in out.splitlines():
        tip, _, ref = line.partition(" ")
        tips[ref] = tip
    return RepoRefs(user, tips)


def _trees(refs: RepoRefs, commits: set[str]) -> dict[str, str]:
    """The tree of each of `commits` that is a commit in the repository."""
    if not commits:
        return {}
    ordered = sorted(commits)
    query = "".join(f"{c}^{{tree}}\n" for c in ordered).encode()
    try:
        proc = refs.user.git.run(
            "cat-file", "--batch-check=%(objectname)", input=query, check=False
        )
    except GitError:
        return {}
    lines = proc.stdout.decode("ascii", "replace").splitlines()
    out = {}
    for commit, line in zip(ordered, lines, strict=False):
        if line and set(line) <= _HEX:  # else "X^{tree} missing"
            out[commit] = line
    return out


def net_lines(refs: RepoRefs, pairs: set[Pair]) -> dict[Pair, tuple[int, int]]:
    """Lines added and removed from `base` to `tip` for each (base, tip) pair, as
    `git diff --numstat --no-renames BASE TIP` counts them; (0, 0) when git cannot say."""
    counted, _ = count_lines(refs, pairs, refs.diff_algorithm())
    return {pair: counted.get(pair, (0, 0)) for pair in pairs}


def count_lines(
    refs: RepoRefs, pairs: set[Pair], algorithm: str
) -> tuple[dict[Pair, tuple[int, int]], set[Pair]]:
    """What `net_lines` answers for the pairs whose commits the repository has, with
    `algorithm` as its `diff.algorithm`; and the pairs of those git surely counted (its diff
    ended well), which may be kept."""
    trees = _trees(refs, {c for pair in pairs for c in pair})
    out = {}
    todo = set()
    for base, tip in pairs:
        if base in trees and tip in trees:
            if trees[base] == trees[tip]:
                out[(base, tip)] = (0, 0)  # the same tree: nothing changed
            else:
                todo.add((trees[base], trees[tip]))
    sure = set(out)
    if not todo:
        return out, sure
    argv = ["diff-tree", "--stdin", "-r", "--numstat", "--no-renames"]
    if algorithm:
        argv.append(f"--diff-algorithm={algorithm}")  # `git diff` reads it, diff-tree not
    query = "".join(f"{a} {b}\n" for a, b in sorted(todo)).encode()
    try:
        proc = refs.user.git.run(*argv, input=query, check=False)
    except GitError:
        return out, sure
    counts = _numstat(proc.stdout.decode("utf-8", "replace"))
    for base, tip in pairs:
        key = (trees.get(base, ""), trees.get(tip, ""))
        if key in todo:
            out[(base, tip)] = counts.get(key, (0, 0))
            if proc.returncode == 0:
                sure.add((base, tip))
    return out, sure


def _numstat(text: str) -> dict[Pair, tuple[int, int]]:
    """The lines added and removed per tree pair of `diff-tree --stdin --numstat` output."""
    counts: dict[Pair, tuple[int, int]] = {}
    current: Pair | None = None
    for line in text.splitlines():
        if "\t" not in line:  # "TREE TREE": the pair whose lines follow
            a, _, b = line.partition(" ")
            current = (a, b)
            counts.setdefault(current, (0, 0))
            continue
        if current is None:
            continue
        added, removed, _ = (line.split("\t") + ["", ""])[:3]
        plus, minus = counts[current]
        plus += int(added) if added.isdigit() else 0
        minus += int(removed) if removed.isdigit() else 0
        counts[current] = (plus, minus)
    return counts
