"""Branch names from outside, checked as `git check-ref-format --branch` checks them."""

from __future__ import annotations

import subprocess

from daemon.git.refname import branch_problem

NAMES = [
    "main", "feature/x", "release-1.2", "a.b", "ü-branch", "x@y",
    "evil:planted", "a*", "-x", "a..b", "a/.hidden", "a.lock", "a/b.lock/c", "a/", "/a",
    "a//b", "a.", "@", "a@{1}", "a b", "a\tb", "a~1", "a^", "a?", "a[b", "a\\b", "",
    "refs/heads/x", ".a", "HEAD",
]  # fmt: skip


GOOD = ["main", "feature/x", "release-1.2", "a.b", "ü-branch", "x@y", "refs/heads/x"]


def git_accepts(name: str) -> bool:
    proc = subprocess.run(
        ["git", "check-ref-format", "--branch", name], capture_output=True, timeout=30
    )
    return proc.returncode == 0


def test_the_check_agrees_with_git_on_good_and_hostile_names() -> None:
    for name in NAMES:
        # Stricter than git at most (it refuses "@" and "HEAD" too), never looser.
        if not branch_problem(name):
            assert git_accepts(name), name
        elif name not in ("@", "HEAD"):
            assert not git_accepts(name), name
    assert not any(branch_problem(n) for n in GOOD)
    assert branch_problem("evil:planted")  # never a refspec of anyone else's
    assert branch_problem("b" * 300)  # longer than loopd takes
