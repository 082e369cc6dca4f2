"""A landed run's identity on its target: the commits that landed, their patch-ids, its lines.

Read once, from what the run's record says of its landing (`landed_as`, `target_commit`,
`base_commit`), so it works whether landing kept the run's commits, merged them or squashed
them into one: the run's own commits are those between the target it started from and
`landed_as` whose message names the run; when none does (a squash with a message of its
own), `landed_as` itself.
"""

from __future__ import annotations

from datetime import datetime

from daemon.aftermath.gitread import (
    added_lines,
    commit_patch_ids,
    diff_patch_id,
    kept_in,
    parent_or_empty,
)
from daemon.git.safe import Git
from daemon.state.aftermath import Aftermath
from daemon.state.records import RunRecord

_SEP, _REC = "\x00", "\x01"


def follows(run: RunRecord) -> bool:
    """Whether the run's work landed somewhere the aftermath can follow."""
    return run.landed and bool(run.landed_as) and bool(run.target) and bool(run.repo)


def target_ref(run: RunRecord, remote: str = "origin") -> str:
    """The ref that holds the target: the branch, or its remote-tracking ref for a push."""
    if (run.landed_how or run.land) == "push":
        return f"refs/remotes/{remote}/{run.target}"
    return f"refs/heads/{run.target}"


def own_commits(git: Git, run: RunRecord) -> list[str]:
    """The run's commits in `landed_as` (oldest first), told by the run id in their message."""
    since = run.target_commit or run.base_commit
    rev = [run.landed_as, f"^{since}"] if since else [run.landed_as, "-n", "200"]
    text = git.out("log", "--no-merges", "--reverse", "--format=%x01%H%x00%B", *rev)
    mark = f"run {run.id}"
    mine = []
    for chunk in text.split(_REC)[1:]:
        sha, _, message = chunk.partition(_SEP)
        if mark in message:
            mine.append(sha)
    if mine:
        return mine
    merge = git.out("rev-parse", "-q", "--verify", f"{run.landed_as}^2", check=False)
    if merge:  # a merge of its branch: the commits the merge brought
        brought = git.out("rev-list", "--no-merges", "--reverse", merge, f"^{run.landed_as}^1")
        return brought.split() or [run.landed_as]
    return [run.landed_as]


def baseline(git: Git, run: RunRecord, ref: str, landed_at: datetime) -> Aftermath:
    """The run's aftermath as it landed: its commits, patch-ids and lines, all kept."""
    commits = own_commits(git, run)
    first, last = commits[0], commits[-1]
    before = parent_or_empty(git, first)
    ids = commit_patch_ids(git, ["--no-walk=unsorted", *commits])
    reverse = [diff_patch_id(git, last, before)]
    if len(commits) > 1:
        reverse += [diff_patch_id(git, c, parent_or_empty(git, c)) for c in commits]
    lines = added_lines(git, before, last)
    record = Aftermath(
        run=run.id,
        loop=run.loop,
        target=run.target,
        target_ref=ref,
        landed_at=landed_at,
        landed_commits=commits,
        landed_as=run.landed_as,
        patch_ids=[ids.get(c, "") for c in commits],
        net_patch_id=diff_patch_id(git, before, last),
        revert_patch_ids=[r for r in reverse if r],
        lines=lines,
        lines_landed=sum(len(v) for v in lines.values()),
        last_seen=run.landed_as,
    )
    record.kept_by_file = kept_in(git, last, lines)
    record.lines_kept = sum(record.kept_by_file.values())
    return record
