"""A run's work as one commit (`land_commits = "squash"`), and whether a target holds it.

The squash commit has the target's commit as its only parent and the files the run's branch
(or its merge with a moved target) holds; its message is `messages.squash_message`. Made
again for the same run on the same parent and files, it is the commit already made (a
landing that is retried pushes or moves nothing new). A target "holds" a run's change when
it contains the run's branch, or has every file the branch changed as the branch has it: then
the run is recorded as already landed and nothing is merged (nor pushed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daemon.git.messages import squash_message
from daemon.git.userrepo import UserRepo

if TYPE_CHECKING:  # `loopd branches` asks `holds` and needs neither
    from daemon.config import LoopConfig
    from daemon.state.records import RunRecord


class AlreadyLanded(Exception):
    """The target holds the run's change already (`commit`: the target's commit)."""

    def __init__(self, commit: str) -> None:
        super().__init__(f"the target already holds the run's change at {commit[:12]}")
        self.commit = commit


def tree_of(user: UserRepo, commit: str) -> str:
    return user.git.out("rev-parse", "--verify", f"{commit}^{{tree}}")


def squash_commit(user: UserRepo, run: RunRecord, cfg: LoopConfig, parent: str, tip: str) -> str:
    """One commit on `parent` with the files of `tip` (the run's branch, or its merge with the
    target), its message composed; `tip` itself when it is that commit already."""
    message = squash_message(run, cfg.done_when)
    tree = tree_of(user, tip)
    # Plumbing (cat-file), not `log`: no config of the repository's starts gpg to read it.
    head, _, body = user.git.out("cat-file", "commit", tip).partition("\n\n")
    fields = [line.split(" ", 1) for line in head.splitlines() if " " in line]
    parents = [value for key, value in fields if key == "parent"]
    if parents == [parent] and ["tree", tree] in fields and body.strip() == message.strip():
        return tip
    return user.git.out("commit-tree", "--no-gpg-sign", tree, "-p", parent, "-m", message)
