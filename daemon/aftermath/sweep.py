"""Every landed run's aftermath brought up to date: by `loopd aftermath` and the daemon's tick.

One `rev-parse` of each target per sweep; a run whose target did not move and whose next
window is not due costs nothing more (`due_only`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from daemon.aftermath.follow import update
from daemon.aftermath.gitread import Blobs, Commit, History, history, range_log
from daemon.aftermath.identity import baseline, follows, target_ref
from daemon.aftermath.verdict import due
from daemon.git.safe import Git, GitError
from daemon.git.userrepo import UserRepo
from daemon.state.aftermath import Aftermath, aftermath_path, load_aftermath, save_aftermath
from daemon.state.eventtypes import Event
from daemon.state.records import RunRecord
from daemon.state.store import StateStore, UnreadableFile

# The records a sweep left, with the mtime of the file each was read from or written as.
Held = dict[str, tuple[Aftermath, int]]
# What a landed run that failed after the fact teaches: (its repository's git, run, record).
Teach = Callable[[Git, RunRecord, Aftermath], Any]


@dataclass
class Sweep:
    """What one sweep found: each run's record, those whose state changed, those that failed."""

    records: list[Aftermath] = field(default_factory=list)
    changed: list[Aftermath] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    taught: dict[str, Any] = field(default_factory=dict)  # run: its post-mortem's result


@dataclass
class _Repos:
    """The repositories and target tips a sweep has read, each once."""

    gits: dict[str, Git] = field(default_factory=dict)
    tips: dict[tuple[str, str], str] = field(default_factory=dict)
    ranges: dict[tuple[str, str, str], list[Commit] | None] = field(default_factory=dict)
    paths: dict[tuple[str, str, str], set[str] | None] = field(default_factory=dict)
    blobs: dict[str, Blobs] = field(default_factory=dict)
    own_blobs: bool = True  # False: the caller's, kept open across sweeps
    histories: dict[tuple[str, str], History | None] = field(default_factory=dict)

    def git(self, repo: str) -> Git:
        if repo not in self.gits:
            self.gits[repo] = UserRepo.locate(Path(repo)).git
        return self.gits[repo]

    def reader(self, repo: str) -> Blobs:
        """The sweep's one `cat-file --batch` of `repo`, started when first read."""
        if repo not in self.blobs:
            self.blobs[repo] = Blobs(self.git(repo))
        return self.blobs[repo]

    def close(self) -> None:
        if self.own_blobs:
            for blobs in self.blobs.values():
                blobs.close()

    def tip(self, repo: str, ref: str) -> str:
        if (repo, ref) not in self.tips:
            self.tips[repo, ref] = self.git(repo).out(
                "rev-parse", "-q", "--verify", ref, check=False
            )
        return self.tips[repo, ref]

    def commits(self, repo: str, since: str, tip: str) -> list[Commit] | None:
        """The commits of `since..tip` with the files each touches, read once per range for
        every run that last saw `since`; None when `since` is not an ancestor of `tip` (the
        target was rewritten)."""
        if (repo, since, tip) not in self.ranges:
            self.ranges[repo, since, tip] = range_log(self.git(repo), since, tip)
        return self.ranges[repo, since, tip]

    def history(self, repo: str, tip: str) -> History | None:
        """The whole history of `tip`, read once for every run looked at for the first time
        (None when it is not a single line of commits)."""
        if (repo, tip) not in self.histories:
            self.histories[repo, tip] = history(self.git(repo), tip)
        return self.histories[repo, tip]

    def touched(self, repo: str, since: str, tip: str) -> set[str] | None:
        """The paths the commits of `since..tip` touch; None when rewritten (one set per
        range, whatever the number of runs asking)."""
        key = (repo, since, tip)
        if key not in self.paths:
            commits = self.commits(repo, since, tip)
            self.paths[key] = None if commits is None else {p for c in commits for p in c.paths()}
        return self.paths[key]


def sweep(
    store: StateStore,
    runs: Iterable[RunRecord],
    now: datetime,
    loop_keys: Callable[[str], tuple[str, str]] = lambda loop: ("origin", ""),
    due_only: bool = False,
    teach: Teach | None = None,
    cache: Held | None = None,
    gits: dict[str, Git] | None = None,
    blobs: dict[str, Blobs] | None = None,
) -> Sweep:
    """Bring the aftermath of each landed run of `runs` up to date at `now`; `loop_keys(loop)`:
    its `remote` and agent profile; `due_only`: only those whose target moved or whose window
    is due (the daemon's tick); `teach`: what a run reverted after landing teaches
    (aftermath/lesson.py); `cache`: the records as the last sweep left them (the daemon's), so
    a run whose files no new commit touched is neither read nor written; `gits`: each
    repository's git as located before (the daemon's: not located again each sweep);
    `blobs`: each repository's `cat-file --batch`, kept open by the caller across sweeps
    (the daemon's: no process started a look; the caller closes them)."""
    found, repos = Sweep(), _Repos(gits=gits if gits is not None else {})
    if blobs is not None:
        repos.blobs, repos.own_blobs = blobs, False
    try:
        _sweep(store, runs, now, loop_keys, due_only, teach, cache, found, repos)
    finally:
        repos.close()
    return found


def _sweep(
    store: StateStore,
    runs: Iterable[RunRecord],
    now: datetime,
    loop_keys: Callable[[str], tuple[str, str]],
    due_only: bool,
    teach: Teach | None,
    cache: Held | None,
    found: Sweep,
    repos: _Repos,
) -> None:
    held = cache if cache is not None else {}
    defer = due_only and cache is not None  # the daemon's records, held between its looks
    for run in runs:
        if not follows(run):
            continue
        try:
            record = _one(store, repos, run, now, loop_keys, due_only, found, held, defer)
            # Only a reverted or edited run can teach (lesson.failed_after): the others are
            # not handed over at each look.
            teachable = record is not None and record.state in ("reverted", "edited")
            if record is not None and teach is not None and teachable and not record.taught:
                taught = teach(repos.git(run.repo), run, record)
                if record.taught:
                    save_aftermath(store.run_dir(run.id), record)
                    held[run.id] = (record, _mark(store.run_dir(run.id)))
                    found.taught[run.id] = taught
        except (GitError, OSError, ValueError) as exc:
            found.failed[run.id] = str(exc).splitlines()[0] if str(exc) else repr(exc)
            store.events.append(
                Event.AFTERMATH_FAILED, now, loop=run.loop, run=run.id, error=found.failed[run.id]
            )
            continue
        if record is not None:
            found.records.append(record)


def _one(
    store: StateStore,
    repos: _Repos,
    run: RunRecord,
    now: datetime,
    loop_keys: Callable[[str], tuple[str, str]],
    due_only: bool,
    found: Sweep,
    held: Held,
    defer: bool = False,
) -> Aftermath | None:
    """One run's record brought up to date; `defer`: one whose state, kept lines and windows
    did not change stays in memory, written with its next change (the daemon's)."""
    kept = held.get(run.id)
    if due_only and kept is not None:
        # The daemon's record in memory, its target read once for all: a run whose files no
        # new commit touched and whose window is not due costs a set lookup, not a stat.
        held_record = kept[0]
        tip = repos.tip(run.repo, held_record.target_ref)
        if _quiet(repos, run.repo, held_record, tip):
            held_record.last_seen = tip  # in memory: written with its next change or window
        if tip == held_record.last_seen and not due(held_record, now):
            return held_record
    folder = store.run_dir(run.id)
    mark = _mark(folder)
    # The record in memory while its file is the one it was read from or written as (a
    # `loopd aftermath` beside the daemon writes it too).
    record = kept[0] if kept is not None and kept[1] == mark else _load(store, folder)
    git = repos.git(run.repo)
    first = record is None
    if record is None:
        record = _begin(store, git, run, loop_keys(run.loop))
    held[run.id] = (record, _mark(folder))
    tip = repos.tip(run.repo, record.target_ref)
    if due_only and _quiet(repos, run.repo, record, tip):
        record.last_seen = tip  # kept in memory: written with its next change or window
    if due_only and tip == record.last_seen and not due(record, now):
        return record
    was = (record.state, record.lines_kept, len(record.windows))
    shared = repos.ranges.get((run.repo, record.last_seen, tip))
    if shared is None and first and record.on_target and tip != record.last_seen:
        shared = _from_history(repos, run.repo, record, tip)
    changed = update(git, record, tip, now, shared is not None, shared, repos.reader(run.repo))
    if defer and not first and was == (record.state, record.lines_kept, len(record.windows)):
        # Only its commit list and `last_seen` moved (a person's commit in its file, not in
        # its lines): the record on disk still says what became of the run; a look from its
        # `last_seen` (a restart, `loopd aftermath`) reads the same commits again.
        return record
    # Saved before its event: a loopd killed between them finds the record up to date at its
    # restart and records no change twice (at worst one event is missing). A record whose
    # state did not change is written without the fsyncs: the one before it on disk is
    # whole, and a look from its `last_seen` comes to the same (the commits since read again).
    save_aftermath(folder, record, durable=changed)
    held[run.id] = (record, _mark(folder))
    if changed:
        found.changed.append(record)
        _changed(store, record, was[0], now)
    return record


def _from_history(repos: _Repos, repo: str, record: Aftermath, tip: str) -> list[Commit] | None:
    """A run looked at for the first time: the commits after its landing that touch its
    files, from the target's history read once for all of them (a sweep from scratch is then
    one `git log`, not one per run); None when that history cannot say (a merge in it, a
    rename of the run's files, its landing not on it): the run's own log then."""
    if record.last_seen != record.landed_commits[-1]:
        return None
    found = repos.history(repo, tip)
    return found.after(record.last_seen, list(record.lines)) if found is not None else None


def _mark(folder: Path) -> int:
    try:
        return aftermath_path(folder).stat().st_mtime_ns
    except OSError:
        return 0


def _load(store: StateStore, folder: Path) -> Aftermath | None:
    try:
        return load_aftermath(folder)
    except UnreadableFile as problem:  # cut by a crash mid-write: made again from git
        store.report_unreadable(problem)
        return None


def _quiet(repos: _Repos, repo: str, record: Aftermath, tip: str) -> bool:
    """Whether the target moved past the record without touching its files (one `git log`
    per range for all the runs it holds)."""
    if tip == record.last_seen or not record.last_seen or record.state in ("gone", "pending"):
        return False
    touched = repos.touched(repo, record.last_seen, tip)
    return touched is not None and touched.isdisjoint(record.lines)


def _begin(store: StateStore, git: Git, run: RunRecord, keys: tuple[str, str]) -> Aftermath:
    """The run's identity read from git, written before anything is followed."""
    remote, agent = keys
    ref = target_ref(run, remote)
    record = baseline(git, run, ref, run.finished or run.started)
    record.agent = agent
    if ref.startswith("refs/remotes/"):  # pushed: on the target once merged there
        record.on_target, record.last_seen, record.state = False, "", "pending"
    save_aftermath(store.run_dir(run.id), record)
    store.events.append(
        Event.AFTERMATH_STARTED,
        record.landed_at,
        loop=run.loop,
        run=run.id,
        target=record.target,
        commits=record.landed_commits,
        lines=record.lines_landed,
    )
    return record


def _changed(store: StateStore, record: Aftermath, was: str, now: datetime) -> None:
    by = [f"{c.commit[:12]} {c.author}: {c.message}" for c in record.commits][-10:]
    store.events.append(
        Event.AFTERMATH_CHANGED,
        now,
        loop=record.loop,
        run=record.run,
        state=record.state,
        was=was,
        lines_landed=record.lines_landed,
        lines_kept=record.lines_kept,
        by=by,
    )
