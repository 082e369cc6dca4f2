"""The run's tree: a git worktree on branch `loopd/LOOP/RUN_ID`, or the repository in place."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from daemon.runs.git import Git, GitError
from daemon.state.atomic import ensure_dir


class TreeError(Exception):
    """The run's tree could not be made; the message says why and what to do."""


@dataclass
class RunTree:
    """Where the agent works, on which branch, from which commit."""

    path: Path
    repo: Path
    branch: str
    base_commit: str
    isolation: str

    @property
    def git(self) -> Git:
        return Git(self.path)


def branch_name(loop: str, run_id: str) -> str:
    return f"loopd/{loop}/{run_id}"


def scratch_dir(worktrees_root: Path, loop: str, run_id: str) -> Path:
    """The agent's scratch folder: beside the worktree, outside the tree and outside state/."""
    return worktrees_root / loop / f"{run_id}.agent"


def prepare_tree(
    repo: Path, loop: str, run_id: str, isolation: str, base: str, worktrees_root: Path
) -> RunTree:
    """Make the worktree and branch (or check the repository for in-place work)."""
    repo_git = Git(repo)
    try:
        base_commit = repo_git.out("rev-parse", "--verify", f"{base}^{{commit}}")
    except GitError as exc:
        raise TreeError(
            f"base {base!r} is not a commit in {repo}: {exc.stderr.strip()}. "
            "Fix: set `base` in the loop file to a branch, tag or commit that exists"
        ) from None
    if isolation == "in-place":
        if not repo_git.is_clean():
            raise TreeError(
                f'{repo} has uncommitted changes and the loop uses isolation = "in-place". '
                'Fix: commit or stash them, or use isolation = "worktree"'
            )
        current = repo_git.out("symbolic-ref", "--short", "-q", "HEAD", check=False)
        if not current:
            raise TreeError(
                f"{repo} has a detached HEAD; in-place runs commit to the checked-out branch. "
                'Fix: check out a branch, or use isolation = "worktree"'
            )
        head = repo_git.out("rev-parse", "HEAD")
        return RunTree(path=repo, repo=repo, branch=current, base_commit=head, isolation="in-place")
    branch = branch_name(loop, run_id)
    path = ensure_dir(worktrees_root / loop) / run_id
    if path.exists():
        shutil.rmtree(path)
    repo_git.run("worktree", "add", "-q", "-b", branch, str(path), base_commit)
    return RunTree(
        path=path, repo=repo, branch=branch, base_commit=base_commit, isolation="worktree"
    )


def reopen_tree(repo: Path, path: Path, branch: str, isolation: str, base_commit: str) -> RunTree:
    """The tree of a run that is resumed after a restart; re-adds a lost worktree."""
    if isolation == "worktree" and not (path / ".git").exists():
        Git(repo).run("worktree", "prune")
        ensure_dir(path.parent)
        if path.exists():
            shutil.rmtree(path)
        Git(repo).run("worktree", "add", "-q", str(path), branch)
    return RunTree(
        path=path, repo=repo, branch=branch, base_commit=base_commit, isolation=isolation
    )


def remove_tree(tree: RunTree) -> None:
    """Remove the worktree; the branch stays for the person. Removing it again is harmless."""
    if tree.isolation != "worktree":
        return
    repo_git = Git(tree.repo)
    repo_git.run("worktree", "remove", "--force", str(tree.path), check=False)
    if tree.path.exists():
        shutil.rmtree(tree.path, ignore_errors=True)
    repo_git.run("worktree", "prune", check=False)
