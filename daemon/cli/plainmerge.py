"""Whether a person merged a run's branch by hand, asked of git without the models, for the
read commands' plain path (cli/plainruns.py): `loopd runs` and `show` record such a run landed
"by hand", or already landed when the target holds its change (landing/branches.HandMerges)
before they show it, so the plain path leaves it to
the full one. Imported on first use: only runs that may have landed need git.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.git.safe import Git, GitError
from daemon.landing.held import held_many
from daemon.plain.records import Unsure

HEADS = "refs/heads/"


def hand_merged(runs: list[Any]) -> bool:
    """Whether a person merged the branch of one of `runs` (ended, not landed, with a branch
    and a target: plain/landing.may_have_landed) into its target, or the target holds its
    change already, as landing/branches.HandMerges tells it."""
    tips: dict[str, dict[str, str]] = {}
    maybe: dict[str, list[tuple[str, str, str]]] = {}  # repo -> (base, tip, target)
    for run in runs:
        if run.repo not in tips:
            tips[run.repo] = _branch_tips(run.repo)
        tip = tips[run.repo].get(HEADS + run.branch, "")
        target = tips[run.repo].get(HEADS + run.target, "")
        if not tip or not target or tip == run.base_commit:
            continue  # a branch that holds nothing of the run's is not its work landed
        merged = _git(run.repo, f"--merged={target}", "--format=%(refname)", HEADS)
        if HEADS + run.branch in merged.splitlines():
            return True
        if run.base_commit and target != run.base_commit:  # else it holds nothing of it
            maybe.setdefault(run.repo, []).append((run.base_commit, tip, target))
    # Recorded as already landed by the full path: one git question per repository.
    return any(held_many(Git(Path(repo), plain=True), triples) for repo, triples in maybe.items())


def _branch_tips(repo: str) -> dict[str, str]:
    """The repository's branches and the commits they name (landing/refbatch.read_refs)."""
    out = _git(repo, "--format=%(objectname) %(refname)", HEADS)
    tips = {}
    for line in out.splitlines():
        tip, _, ref = line.partition(" ")
        tips[ref] = tip
    return tips


def _git(repo: str, *args: str) -> str:
    try:
        return Git(Path(repo), plain=True).out("for-each-ref", *args)
    except (GitError, OSError):
        raise Unsure(f"git in {repo}") from None  # the full path asks git its own way
