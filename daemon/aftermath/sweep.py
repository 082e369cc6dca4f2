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
from daemon.aftermath.identity import baseline, follows, target_ref
from daemon.aftermath.verdict import due
from daemon.git.safe import Git, GitError
from daemon.git.userrepo import UserRepo
from daemon.state.aftermath import Aftermath, load_aftermath, save_aftermath
from daemon.state.eventtypes import Event
from daemon.state.records import RunRecord
from daemon.state.store import StateStore, UnreadableFile

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

    def git(self, repo: str) -> Git:
        if repo not in self.gits:
            self.gits[repo] = UserRepo.locate(Path(repo)).git
        return self.gits[repo]

    def tip(self, repo: str, ref: str) -> str:
        if (repo, ref) not in self.tips:
            self.tips[repo, ref] = self.git(repo).out(
                "rev-parse", "-q", "--verify", ref, check=False
            )
        return self.tips[repo, ref]


def sweep(
    store: StateStore,
    runs: Iterable[RunRecord],
    now: datetime,
    loop_keys: Callable[[str], tuple[str, str]] = lambda loop: ("origin", ""),
    due_only: bool = False,
    teach: Teach | None = None,
) -> Sweep:
    """Bring the aftermath of each landed run of `runs` up to date at `now`; `loop_keys(loop)`:
    its `remote` and agent profile; `due_only`: only those whose target moved or whose window
    is due (the daemon's tick); `teach`: what a run reverted after landing teaches
    (aftermath/lesson.py)."""
    found, repos = Sweep(), _Repos()
    for run in runs:
        if not follows(run):
            continue
        try:
            record = _one(store, repos, run, now, loop_keys(run.loop), due_only, found)
            if record is not None and teach is not None and not record.taught:
                taught = teach(repos.git(run.repo), run, record)
                if record.taught:
                    save_aftermath(store.run_dir(run.id), record)
                    found.taught[run.id] = taught
        except (GitError, OSError, ValueError) as exc:
            found.failed[run.id] = str(exc).splitlines()[0] if str(exc) else repr(exc)
            store.events.append(
                Event.AFTERMATH_FAILED, now, loop=run.loop, run=run.id, error=found.failed[run.id]
            )
            continue
        if record is not None:
            found.records.append(record)
    return found


def _one(
    store: StateStore,
    repos: _Repos,
    run: RunRecord,
    now: datetime,
    keys: tuple[str, str],
    due_only: bool,
    found: Sweep,
) -> Aftermath | None:
    folder = store.run_dir(run.id)
    try:
        record = load_aftermath(folder)
    except UnreadableFile as problem:  # cut by a crash mid-write: made again from git
        store.report_unreadable(problem)
        record = None
    git = repos.git(run.repo)
    if record is None:
        record = _begin(store, git, run, keys)
    tip = repos.tip(run.repo, record.target_ref)
    if due_only and tip == record.last_seen and not due(record, now):
        return record
    was = record.state
    if update(git, record, tip, now):
        found.changed.append(record)
        _changed(store, record, was, now)
    save_aftermath(folder, record)
    return record


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
