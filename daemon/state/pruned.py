"""`state/pruned-runs.jsonl`: what `retain_days` folded away, one JSON line per run.

A run pruned after `retain_days` loses its folder (`runs/RUN_ID/`, its record included); one
line here keeps what it was: its loop, trigger, outcome and reason, its times, its branch and
whether it was deleted, and when it was pruned. `loopd runs` lists these lines after the
runs still kept, and `loopd show RUN_ID` of a pruned run prints its line. A line is written
(and synced) before the folder goes, so a crash between the two leaves the folder to be
folded again: readers take the last line of a run. A line is kept `retain_days` after its
run was pruned (`trim_pruned`, with each prune), then dropped: the index follows retention.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from daemon.state.atomic import open_private, write_atomic
from daemon.state.prunedindex import PRUNED_INDEX as PRUNED_INDEX  # its readers import it here
from daemon.state.prunedindex import index_path, lines_backwards, pruned_line
from daemon.state.records import RunRecord


class PrunedRun(BaseModel):
    """One line of `state/pruned-runs.jsonl`."""

    model_config = ConfigDict(extra="ignore")

    run: str
    loop: str
    task: str = ""
    trigger: str = ""  # its kind: push, schedule, manual, ...
    trigger_reason: str = ""
    started: datetime | None = None
    finished: datetime | None = None
    outcome: str | None = None
    reason: str = ""
    attempts: int = 0
    tokens: int = 0
    branch: str = ""  # the run's branch when it was pruned ("": it had none left)
    branch_deleted: bool = False  # pruning deleted that branch
    landed: str = ""  # how its work landed (merge, push, by hand); "": it did not
    landed_as: str = ""  # the commit its target was moved to
    pruned: datetime
    retain_days: int = 0

    @classmethod
    def of(
        cls, run: RunRecord, pruned: datetime, retain_days: int, branch: str, deleted: bool
    ) -> PrunedRun:
        return cls(
            run=run.id,
            loop=run.loop,
            task=run.task.strip()[:500],
            trigger=run.trigger.kind,
            trigger_reason=run.trigger.reason[:300],
            started=run.started,
            finished=run.finished,
            outcome=run.outcome,
            reason=run.reason[:500],
            attempts=len(run.attempts),
            tokens=run.tokens,
            branch=branch,
            branch_deleted=deleted,
            landed=(run.landed_how or "landed") if run.landed else "",
            landed_as=run.landed_as if run.landed else "",
            pruned=pruned,
            retain_days=retain_days,
        )

    def line(self) -> str:
        """What `loopd show` says of it."""
        return pruned_line(self.pruned, self.retain_days)


def append_pruned(root: Path, entry: PrunedRun) -> None:
    """Add `entry`'s line, synced before the caller removes the run's folder."""
    with open_private(index_path(root)) as fh:
        fh.write((entry.model_dump_json(exclude_defaults=True) + "\n").encode("utf-8"))
        fh.flush()
        os.fsync(fh.fileno())


def trim_pruned(root: Path, retain_days: int, now: datetime) -> int:
    """Drop the lines of runs pruned more than `retain_days` ago (0 keeps them all), and
    lines no longer readable: the index follows retention too. How many lines went."""
    path = index_path(root)
    if retain_days <= 0 or not path.is_file():
        return 0
    cutoff = now - timedelta(days=retain_days)
    kept: list[bytes] = []
    dropped = 0
    with path.open("rb") as fh:
        for raw in fh:
            entry = _parse(raw.rstrip(b"\n"))
            when = entry.pruned if entry is not None else None
            if when is not None and when.tzinfo is None:
                when = when.replace(tzinfo=cutoff.tzinfo)
            if when is None or when < cutoff:
                dropped += 1
            else:
                kept.append(raw if raw.endswith(b"\n") else raw + b"\n")
    if dropped:
        write_atomic(path, b"".join(kept))
    return dropped


def _parse(raw: bytes) -> PrunedRun | None:
    try:
        return PrunedRun.model_validate_json(raw)
    except ValidationError:
        return None  # a line cut by a crash: its folder is still there, folded again


def newest_pruned(root: Path, loop: str | None = None, limit: int = 50) -> list[PrunedRun]:
    """Up to `limit` pruned runs (of `loop`), newest pruned first, each run once."""
    seen: set[str] = set()
    out: list[PrunedRun] = []
    for raw in lines_backwards(index_path(root)):
        if len(out) >= limit:
            break
        entry = _parse(raw)
        if entry is None or entry.run in seen or loop not in (None, entry.loop):
            continue
        seen.add(entry.run)
        out.append(entry)
    return out


def find_pruned(root: Path, run_id: str) -> PrunedRun | None:
    """The line of `run_id`, when it was pruned (the last, when folded twice)."""
    needle = run_id.encode()
    for raw in lines_backwards(index_path(root)):
        if needle in raw:
            entry = _parse(raw)
            if entry is not None and entry.run == run_id:
                return entry
    return None
