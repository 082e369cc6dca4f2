"""What an attempt may not do that it did: the kinds of violation, how each reads, and the
sets of kinds the run's decisions name (state/records.py re-exports them)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

ViolationKind = Literal[
    "protected",
    "ref_moved",
    "repo_config",
    "repo_hook",
    "repo_info",
    "detached_head",
    "git_dir",
    "check_changed_tree",
    "checks_weakened",
    "too_large",
    "link_out_of_tree",
]
# Violations that are the checks' own failing: a check changed the tree, tests were weakened,
# a link of the commit led the checks out of their tree.
CHECK_KINDS = frozenset({"check_changed_tree", "checks_weakened", "link_out_of_tree"})
# Violations that fail the attempt whatever its checks say, named first when a run gives up.
FAILING_KINDS = CHECK_KINDS | {"too_large"}
# Violations in the user's repository itself: the run ends and a person looks.
REPOSITORY_KINDS = frozenset({"ref_moved", "repo_config", "repo_hook", "repo_info"})
# The target of a `too_large` violation for a commit whose whole tree is over max_tree.
WHOLE_TREE = "the whole tree"
_HEADS = {
    "protected": "protected path changed",
    "ref_moved": "ref moved",
    "repo_config": "repository config changed",
    "repo_hook": "repository hook changed",
    "repo_info": "repository info file changed",
    "detached_head": "commits off the run's base",
    "git_dir": "the tree's git directory was replaced",
    "check_changed_tree": "a check changed files the commit holds",
    "checks_weakened": "the checks test less than on the base",
    "too_large": "too large to keep (max_file_size, max_tree)",
    "link_out_of_tree": "a symbolic link out of the check tree",
}


class Violation(BaseModel):
    model_config = ConfigDict(extra="ignore")

    """Something an attempt may not do that it did: a protected path changed, a ref moved,
    the user's repository config, hooks or info files changed, HEAD left on commits that do
    not descend from the base, the tree's `.git` replaced."""

    kind: ViolationKind
    target: str  # the protected path, the ref, the file under the git directory, the commit
    detail: str = ""

    def text(self) -> str:
        """One line for people and models."""
        head = f"{_HEADS[self.kind]}: {self.target}"
        return f"{head} ({self.detail})" if self.detail else head

    def __str__(self) -> str:
        return self.text()

    @classmethod
    def from_legacy(cls, text: str) -> Violation:
        """A violation as run.toml files written before violations were records hold it."""
        for prefix, kind in (
            ("protected path changed: ", "protected"),
            ("ref moved: ", "ref_moved"),
        ):
            if text.startswith(prefix):
                return cls(kind=kind, target=text[len(prefix) :])
        return cls(kind="protected", target="", detail=text)
