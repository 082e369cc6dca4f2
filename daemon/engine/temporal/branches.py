"""A run's branch on `[engine] remote`: published by the home, continued by any worker.

The home pushes the run's base as branch `loopd/LOOP/RUN_ID`; a worker fetches it into its own
copy of the repository, makes its tree there, and pushes each attempt's commit back, so the
next attempt (or a retry) can continue on another machine. When the run ends the home fetches
the branch into the person's repository, where it stays for review.

Git goes through loopd's safe git (daemon/git/safe.py); only ssh is given back for the remote,
so a remote reached over ssh works with the user's own ssh configuration.
"""

from __future__ import annotations

import os
from pathlib import Path

from daemon.git.safe import Git, GitError
from daemon.git.tree import (
    RunTree,
    TreeError,
    branch_name,
    locate_user,
    prepare_tree,
    remove_tree,
    tree_of_record,
)
from daemon.git.userrepo import LedgerWriter
from daemon.state.records import RunRecord

REMOTE = ("-c", "core.sshCommand=ssh")  # the safe git turns ssh off; the remote needs it
FETCHED = "refs/loopd/remote"  # where a worker keeps what it fetched (the guards ignore it)


def same_repository(repo: Path, remote: str) -> bool:
    """Whether `remote` is this very repository (the default remote: the loop's `repo`)."""
    path = Path(os.path.expanduser(remote))
    if not path.is_absolute() or not path.exists():
        return False
    try:
        return path.resolve() == repo.resolve() or os.path.samefile(path, repo)
    except OSError:
        return False


def publish(repo: Path, remote: str, branch: str, commit: str) -> None:
    """Make `branch` on the remote point at `commit` (the run's base)."""
    git = Git(repo)
    if same_repository(repo, remote):
        git.run("update-ref", f"refs/heads/{branch}", commit)
        return
    git.run(*REMOTE, "push", "-q", "--no-verify", "-f", remote, f"{commit}:refs/heads/{branch}")


def fetch_branch(repo: Path, remote: str, branch: str) -> None:
    """Bring the remote's `branch` into the person's repository as the same branch."""
    if same_repository(repo, remote):
        return
    Git(repo).run(
        *REMOTE, "fetch", "-q", "--no-tags", remote, f"+refs/heads/{branch}:refs/heads/{branch}"
    )


def fetch_head(repo: Path, remote: str, loop: str, run_id: str, head: str) -> None:
    """Bring the run's branch from the remote into this machine's copy; `head` must be there."""
    git = Git(repo)
    branch = branch_name(loop, run_id)
    if not same_repository(repo, remote):
        fetched = f"{FETCHED}/{loop}/{run_id}"
        try:
            git.run(*REMOTE, "fetch", "-q", "--no-tags", remote, f"+refs/heads/{branch}:{fetched}")
        except GitError as exc:
            raise TreeError(
                f"cannot fetch branch {branch} from {remote} into {repo}: "
                f"{exc.stderr.strip()[:300]}. Fix: make [engine] remote a repository this "
                "worker can reach (a path or an ssh URL)"
            ) from None
    if git.out("cat-file", "-t", head, check=False) != "commit":
        raise TreeError(f"commit {head[:12]} of run {run_id} is not in {repo} nor at {remote}")


def open_tree(
    repo: Path,
    remote: str,
    loop: str,
    run_id: str,
    head: str,
    worktrees: Path,
    isolation: str,
    writer: LedgerWriter,
    kept: RunRecord | None = None,
) -> tuple[RunTree, bool]:
    """The run's tree on this machine at `head` (what the last attempt pushed), made as the
    local engine makes it (its isolation, loopd's own git directory beside it); and whether
    it is new (the loop's `setup` has not run in it).

    `kept` is this machine's record of the run: its tree is used again when it is still at
    `head` (the checks after an attempt here see what the agent left, ignored files too).
    """
    if kept is not None and kept.own_git_dir and kept.worktree:
        tree = tree_of_record(kept, worktrees)
        try:
            if tree.own.exists() and tree.path.is_dir() and tree.own.tip() == head:
                return tree, False
        except GitError:
            pass
        close_tree(tree, remote, keep_branch=True)
    fetch_head(repo, remote, loop, run_id, head)
    user = locate_user(repo)
    # The branch here is made again at `head`, as the local engine makes it at its base.
    user.delete_ref(writer, f"refs/heads/{branch_name(loop, run_id)}", "run branch taken again")
    if isolation == "worktree":
        user.git.run("worktree", "prune")
    return prepare_tree(repo, loop, run_id, isolation, head, worktrees, writer), True


def push_tree(tree: RunTree, remote: str) -> None:
    """Push the run's branch, as this machine's copy holds it, to the remote."""
    if same_repository(tree.repo, remote):
        return  # the branch is the remote's already
    ref = f"refs/heads/{tree.branch}"
    Git(tree.repo).run(*REMOTE, "push", "-q", "--no-verify", "-f", remote, f"{ref}:{ref}")


def close_tree(tree: RunTree, remote: str, keep_branch: bool = False) -> None:
    """Remove the tree and loopd's git directory; the local branch too when the remote holds
    the run's branch."""
    remove_tree(tree)
    if not keep_branch and not same_repository(tree.repo, remote):
        git = Git(tree.repo)
        git.run("branch", "-q", "-D", tree.branch, check=False)
        loop, run_id = tree.branch.split("/")[1:3]
        git.run("update-ref", "-d", f"{FETCHED}/{loop}/{run_id}", check=False)
