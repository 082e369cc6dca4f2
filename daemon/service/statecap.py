"""`[limits] state_max`: `state/` as a whole stays under a size. Measured by the housekeeper
(hourly, and at once when its estimate of the growth since says it is over: `Growth`); over
it, the transcripts of the oldest finished runs go first (they are most of the bytes), then
the rest of their attempt folders, then the oldest rotated event files (never the current
log). Never a live run's files, nor a run an open escalation, a live rule or a deferred
lesson cites. The measure is kept in `state/usage.toml` for `loopd status` (walking
`state/` on every status would be slow), which shows its age.
"""

from __future__ import annotations

import bisect
import os
import shutil
import tomllib
from datetime import datetime
from pathlib import Path

import tomli_w

from daemon.state.atomic import write_atomic
from daemon.state.events import rotated_numbers
from daemon.state.records import Record
from daemon.state.runids import loop_of
from daemon.state.store import StateStore, UnreadableFile, dump_toml, read_model
from daemon.state.stored import compress, stored

EVICTED_MARKER = "evicted.toml"
USAGE_FILE = "usage.toml"
LARGEST = 5  # loops `state/usage.toml` names


class StateUsage(Record):
    """`state/usage.toml`: what `state/` held when last measured."""

    measured: datetime
    total: int = 0  # bytes of state/ as a whole
    limit: int = 0  # state_max in force then
    loops: dict[str, int] = {}  # the largest loops' runs, in bytes


def tree_size(path: Path) -> int:
    """Bytes of the files under `path` (links not followed)."""
    total = 0
    try:
        entries = list(os.scandir(path))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return 0
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                total += tree_size(Path(entry.path))
            else:
                total += entry.stat(follow_symlinks=False).st_size
        except FileNotFoundError:
            continue  # gone while measured
    return total


def measure(store: StateStore) -> tuple[int, dict[str, int]]:
    """Bytes of `state/` as a whole, and of each run's folder."""
    runs = {run_id: tree_size(store.run_dir(run_id)) for run_id in store.run_ids()}
    others = 0
    for entry in os.scandir(store.root):
        if entry.name == "runs":
            continue
        if entry.is_dir(follow_symlinks=False):
            others += tree_size(Path(entry.path))
        else:
            try:
                others += entry.stat(follow_symlinks=False).st_size
            except FileNotFoundError:
                continue
    return others + sum(runs.values()), runs


def compress_finished(store: StateStore) -> tuple[int, int]:
    """Compress the transcripts of finished runs (their readers take either form): how
    many files, and the bytes saved. A live run's are being written, and left alone."""
    live = set(store.live_runs())
    files = saved = 0
    for run_id in store.run_ids():
        if run_id in live:
            continue
        plain = sorted(store.run_dir(run_id).glob("attempt-*/transcript.jsonl"))
        if not plain or not _finished(store, run_id):
            continue
        for path in plain:
            saved += compress(path)
            files += 1
    return files, saved


def _finished(store: StateStore, run_id: str) -> bool:
    try:
        return store.load_run(run_id).outcome is not None
    except (FileNotFoundError, UnreadableFile, ValueError):
        return False


def enforce(
    store: StateStore,
    limit: int,
    now: datetime,
    protected: set[str],
    events_removed: list[str] | None = None,
) -> tuple[StateUsage, list[str]]:
    """Evict from the oldest finished runs, then the oldest rotated event files, until
    `state/` is under `limit`; the usage measured after, and the runs something was evicted
    from (the event files deleted are added to `events_removed`)."""
    total, runs = measure(store)
    evicted: list[str] = []
    if total > limit:
        live = set(store.live_runs())
        candidates = [r for r in sorted(runs) if r not in live and r not in protected]
        for whole in (False, True):  # transcripts first, then whole attempt folders
            for run_id in candidates:
                if total <= limit:
                    break
                freed = _evict(store, run_id, now, whole)
                if freed:
                    total -= freed
                    runs[run_id] -= freed
                    if run_id not in evicted:
                        evicted.append(run_id)
        if total > limit:
            freed, names = _drop_rotated_events(store, total - limit)
            total -= freed
            if events_removed is not None:
                events_removed.extend(names)
    usage = StateUsage(measured=now, total=total, limit=limit, loops=_largest(runs))
    write_atomic(store.root / USAGE_FILE, dump_toml(usage))
    return usage, evicted


def events_bytes(store: StateStore) -> int:
    """Bytes of the event log and its rotated files (a stat each)."""
    current = store.events.path
    total = 0
    for n in [None, *rotated_numbers(current)]:
        name = current.name if n is None else f"{current.stem}-{n}{current.suffix}"
        try:
            total += os.lstat(current.with_name(name)).st_size
        except FileNotFoundError:
            continue
    return total


def _drop_rotated_events(store: StateStore, over: int) -> tuple[int, list[str]]:
    """Delete the oldest rotated event files until `over` bytes are freed (the current log
    stays); the bytes freed and the names."""
    current = store.events.path
    freed, names = 0, []
    for n in sorted(rotated_numbers(current)):
        if freed >= over:
            break
        path = current.with_name(f"{current.stem}-{n}{current.suffix}")
        try:
            if path.is_symlink():
                continue
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            continue
        freed += size
        names.append(path.name)
    return freed, names


class Growth:
    """What `state/` grew by since it was last measured, estimated cheaply: the event files'
    sizes (a stat each) and the folders of the runs live at the measure or begun since
    (walked while live; a run that has ended is walked once more, then its size is kept),
    against the same at the measure. Run folders and events are most of what a night
    writes; the hourly measure counts the rest."""

    def __init__(self) -> None:
        self.total = 0  # bytes at the measure
        self.events = 0
        self.newest = ""  # the newest run id at the measure: later ones are new
        self.base: dict[str, int] = {}  # live runs' folders at the measure
        self.sizes: dict[str, int] = {}  # runs since: their folders when last walked
        self.ended: set[str] = set()  # ... and those walked after they ended

    def measured(self, store: StateStore, total: int) -> None:
        """`state/` was just measured at `total` bytes."""
        self.total = total
        self.events = events_bytes(store)
        ids = store.run_ids()
        self.newest = ids[-1] if ids else ""
        self.base = {r: tree_size(store.run_dir(r)) for r in store.live_runs()}
        self.sizes = dict(self.base)
        self.ended = set()

    def estimate(self, store: StateStore) -> int:
        """`state/`'s bytes now, as estimated from the measure."""
        live = set(store.live_runs())
        ids = store.run_ids()
        new = ids[bisect.bisect_right(ids, self.newest) :] if self.newest else ids
        for run_id in [*live, *new, *(set(self.sizes) - live)]:
            if run_id in self.ended:
                continue
            self.sizes[run_id] = tree_size(store.run_dir(run_id))
            if run_id not in live:
                self.ended.add(run_id)
        grown = events_bytes(store) - self.events
        grown += sum(size - self.base.get(r, 0) for r, size in self.sizes.items())
        return self.total + grown


def _largest(runs: dict[str, int]) -> dict[str, int]:
    loops: dict[str, int] = {}
    for run_id, size in runs.items():
        loops[loop_of(run_id)] = loops.get(loop_of(run_id), 0) + size
    top = sorted(loops.items(), key=lambda item: -item[1])[:LARGEST]
    return dict(top)


def _evict(store: StateStore, run_id: str, now: datetime, whole: bool) -> int:
    """Delete a finished run's transcripts (`whole`: its attempt folders); bytes freed."""
    folder = store.run_dir(run_id)
    if not _finished(store, run_id):
        return 0  # not finished (a crash left it live-less): recovery still needs it
    freed = 0
    removed: list[str] = []
    for attempt in sorted(folder.glob("attempt-*")):
        target = attempt if whole else stored(attempt / "transcript.jsonl")
        if target.is_symlink() or not target.exists():
            continue
        size = tree_size(target) if target.is_dir() else target.stat().st_size
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)
        freed += size
        removed.append(str(target.relative_to(folder)))
    if removed:
        _mark(folder / EVICTED_MARKER, now, removed)
    return freed


def _mark(path: Path, now: datetime, removed: list[str]) -> None:
    """`evicted.toml`: what state_max took from the run, and when (kept across evictions)."""
    before: list[str] = []
    try:
        before = list(tomllib.loads(path.read_text(encoding="utf-8")).get("removed", []))
    except (OSError, ValueError):
        pass
    write_atomic(path, tomli_w.dumps({"evicted": now, "removed": before + removed}))


def read_usage(store: StateStore) -> StateUsage | None:
    """What the housekeeper last measured, if it has."""
    try:
        return read_model(store.root / USAGE_FILE, StateUsage)
    except (FileNotFoundError, UnreadableFile):
        return None
