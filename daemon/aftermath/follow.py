"""Bringing one run's aftermath up to date with its target, incrementally.

Only the commits new on the target since the last check are read, and only those touching
the run's files (`git log LAST..TIP -- FILES`); only the files they touch are read again at
the new tip. A target rewritten under the run (its commits no longer ancestors) is searched
by patch-id, from where the old and new histories part, for a copy of the run's change.
"""

from __future__ import annotations

from datetime import datetime

from daemon.aftermath.gitread import Blobs, Commit, commit_patch_ids, kept_in, log_following
from daemon.aftermath.verdict import mark_windows, verdict
from daemon.git.safe import Git
from daemon.state.aftermath import Aftermath, LaterCommit


def is_ancestor(git: Git, old: str, new: str) -> bool:
    return git.run("merge-base", "--is-ancestor", old, new, check=False).returncode == 0


def update(
    git: Git,
    record: Aftermath,
    tip: str,
    now: datetime,
    moved: bool = False,
    shared: list[Commit] | None = None,
    blobs: Blobs | None = None,
) -> bool:
    """Bring `record` up to `tip` (the target's commit now); True when its state changed.
    `moved`: the caller knows `tip` descends from the record's `last_seen`; `shared`: the
    commits of `last_seen..tip` as the caller read them for every run (no `git log` of its
    own then); `blobs`: the caller's open cat-file."""
    before = record.state
    if tip and tip != record.last_seen:
        _follow(git, record, tip, moved, shared, blobs)
    record.checked_at = now
    mark_windows(record, now)
    return record.state != before


def _follow(
    git: Git,
    record: Aftermath,
    tip: str,
    moved: bool,
    shared: list[Commit] | None,
    blobs: Blobs | None,
) -> None:
    since, last = "", record.last_seen
    if record.last_seen and record.on_target and record.state not in ("gone", "pending"):
        # Its last look saw the run on the target: a target that descends from that still has it.
        since = record.last_seen if moved or is_ancestor(git, record.last_seen, tip) else ""
    if not since:
        landed = record.landed_commits[-1]
        if not is_ancestor(git, landed, tip) and not _find_copy(git, record, tip):
            record.state = "gone" if record.on_target else "pending"
            record.last_seen = tip
            return
        record.on_target = True
        last = record.last_seen
        since = last if last and is_ancestor(git, last, tip) else ""
    full = not since or not record.kept_by_file
    if not since:  # rewritten above the run, or a first sight of it: from the run on
        since, record.commits = record.landed_commits[-1], []
    if shared is not None and since == last:
        commits = _mine(record, shared)
    else:
        commits = _mine(record, log_following(git, f"{since}..{tip}", list(record.lines)))
    files = list(record.lines)  # under the names the commits left them
    _note(git, record, commits, f"{since}..{tip}")
    touched = sorted({path for c in commits for path in c.numstat if path in record.lines})
    if full:
        record.kept_by_file = kept_in(git, tip, record.lines, blobs)
    elif touched:
        lines = {p: record.lines[p] for p in touched}
        record.kept_by_file.update(kept_in(git, tip, lines, blobs))
    record.lines_kept = sum(record.kept_by_file.get(p, 0) for p in files)
    record.last_seen = tip
    record.state = verdict(record)
    if record.state == "reverted" and not record.reverts():
        # Most of its lines removed: the commit that removed the most is the revert.
        max(record.commits, key=lambda c: c.removed - c.added).revert = True


def _mine(record: Aftermath, commits: list[Commit]) -> list[Commit]:
    """The commits among `commits` (oldest first) that touch the run's files; a person's
    rename of one carries its lines (and what is kept of them) to the new name, so the
    commits after it are counted on that name."""
    mine = []
    for c in commits:
        if not any(p in record.lines for p in c.paths()):
            continue
        for old, new in c.renames.items():
            if old in record.lines:
                record.lines[new] = record.lines.get(new, []) + record.lines.pop(old)
                if old in record.kept_by_file:
                    kept = record.kept_by_file.pop(old)
                    record.kept_by_file[new] = record.kept_by_file.get(new, 0) + kept
        mine.append(c)
    return mine


def _note(git: Git, record: Aftermath, commits: list[Commit], rev_range: str) -> None:
    """Record the person's commits among `commits`, each marked when it reverts the run."""
    theirs = [c for c in commits if not c.loopds]
    if not theirs:
        return
    # Only a commit that removes at least the run's lines can be its inverse: patch-ids of
    # the range are read only then.
    removes = [sum(r for p, (_, r) in c.numstat.items() if p in record.lines) for c in theirs]
    inverse_possible = record.revert_patch_ids and max(removes) >= record.lines_landed
    ids = commit_patch_ids(git, [rev_range], list(record.lines)) if inverse_possible else {}
    for c in theirs:
        ours = [*record.landed_commits, record.landed_as]
        named = any(x and (x.startswith(r) or r.startswith(x)) for r in c.reverted() for x in ours)
        inverse = ids.get(c.commit, "") in record.revert_patch_ids
        added = sum(a for p, (a, _) in c.numstat.items() if p in record.lines)
        removed = sum(r for p, (_, r) in c.numstat.items() if p in record.lines)
        record.commits.append(
            LaterCommit(
                commit=c.commit,
                author=c.author,
                date=c.date,
                message=c.subject,
                revert=named or inverse,
                added=added,
                removed=removed,
            )
        )


def _find_copy(git: Git, record: Aftermath, tip: str) -> bool:
    """Whether the rewritten target holds the run's change again by patch-id (a rebase, a
    squash of its commits); when it does, the copy becomes the run's commits."""
    base = git.out("merge-base", record.last_seen or record.landed_commits[-1], tip, check=False)
    rev = [tip, f"^{base}"] if base else [tip]
    files = list(record.lines) or None
    ids = commit_patch_ids(git, rev, files)
    by_id = {pid: commit for commit, pid in ids.items()}
    if record.net_patch_id in by_id:
        copy = [by_id[record.net_patch_id]]
    elif record.patch_ids and all(p in by_id for p in record.patch_ids):
        copy = [by_id[p] for p in record.patch_ids]
    else:
        return False
    record.landed_commits = copy
    record.last_seen = ""  # counted again from the copy on
    return True
