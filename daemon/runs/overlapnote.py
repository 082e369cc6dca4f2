"""A new run's note of the runs it may collide with on landing: the other runs on its target
(under way, or in the target's landing queue) changing files its loop changed lately.

Written into the run's `[trigger]` as it is queued (`new_run`, on every engine), as
`overlaps`. What a run is changing: the files its attempts committed so far (their
`diffstat.json`), else, before its first commit, what its loop's recent runs changed; what
the new run will change is what its own loop's recent runs changed (plain/overlap.py says
which runs are recent). A run of the same loop is no collision: a loop's runs build on
each other.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from daemon.config import LoopConfig
from daemon.config.land import known_target
from daemon.plain.overlap import loop_files, run_files
from daemon.state.landingqueue import landing_queues
from daemon.state.records import OVERLAP_FILES, RunOverlap
from daemon.state.runids import loop_of
from daemon.state.store import StateStore, UnreadableFile


def _others(store: StateStore, run_id: str, loop: str) -> dict[str, tuple[str, str, str]]:
    """The other loops' runs under way or queued to land: id -> (repo, target, step)."""
    found: dict[str, tuple[str, str, str]] = {}
    for queue in landing_queues(store):
        for entry in queue.runs:
            if entry.loop != loop:
                found[entry.run_id] = (queue.repo, queue.target, entry.step)
    for other in store.live_runs():
        if other == run_id or other in found or loop_of(other) == loop:
            continue
        try:
            run = store.load_run(other)
        except (FileNotFoundError, UnreadableFile):
            continue  # its record is not written yet, or unreadable: nothing to compare
        found[other] = (run.repo, run.target, "running")
    return found


def overlap_note(
    store: StateStore, run_id: str, loop: str, cfg: LoopConfig, now: datetime
) -> list[RunOverlap]:
    """The runs on the new run's repository and target changing files its loop changed."""
    repo = cfg.repo_path.resolve()  # the queue files name it resolved
    others = {
        k: v
        for k, v in _others(store, run_id, loop).items()
        if v[0] and Path(v[0]).resolve() == repo
    }
    if not others:
        return []
    state_dir = Path(store.root)
    mine = loop_files(state_dir, loop, now, skip=run_id)
    if not mine:
        return []  # nothing changed lately: no guess of what this run will change
    target = known_target(cfg)
    notes = []
    for other, (_repo, their_target, step) in sorted(others.items()):
        if target and their_target and their_target != target:
            continue
        theirs = run_files(state_dir, other) or loop_files(state_dir, loop_of(other), now, other)
        both = sorted(mine & theirs)
        if both:
            notes.append(
                RunOverlap(run=other, loop=loop_of(other), step=step, files=both[:OVERLAP_FILES])
            )
    return notes
