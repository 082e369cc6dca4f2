"""The run index: the few fields of each run record that a listing of thousands of runs reads
(`loopd branches`), cached in `state/runs-index.json`, beside the net +/- lines of each run's
branch.

Parsing a `run.toml` costs about a millisecond (TOML in pure Python): 10,000 of them are
seconds. The index keeps, per run, those fields and the identity of the `run.toml` they came
from (inode, size, modification time); a stat tells whether the file changed since, and only a
changed or new record is read again. Nothing writes the index but its readers, so a record
saved by any process (the daemon, `loopd once`, a CLI command) is seen at the next read; a lost
or damaged index costs one slow listing, never a wrong one.

The lines of a branch are what git counts from the run's base to the branch's tip: kept with
the two commits and the diff algorithm they were counted with, they hold as long as those do
(commits never change), so a listing asks git only about branches that moved or are new.
"""

from __future__ import annotations

import json
import os
from collections import namedtuple
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from daemon.state.atomic import write_atomic
from daemon.state.records import RunRecord
from daemon.state.store import StateStore, UnreadableFile

INDEX_FILE = "runs-index.json"
VERSION = 2  # the shape of "runs"; "lines" is read when present, so it needs no new version
# What the listings read: the outcome, the landing state (people/landstate.py) and what
# noticing a hand merge needs (landing/branches.py).
FIELDS = (
    "loop",
    "outcome",
    "phase",
    "branch",
    "branch_deleted",
    "isolation",
    "repo",
    "base_commit",
    "land",
    "target",
    "landed",
    "landed_as",
    "landed_how",
    "landing",
)
_TIMES = ("started", "finished")


# An entry: the inode, size and modification time of the run.toml it was read from, then the
# FIELDS, the trigger's kind and the times, in that order (a list: 10,000 of them load fast).
_FILE = 3
_WIDTH = _FILE + len(FIELDS) + 1 + len(_TIMES)

Trigger = namedtuple("Trigger", ["kind"])
_TRIGGERS: dict[str, Trigger] = {}


def _fields_tuple(name: str, fields: list[str]) -> Any:
    """A namedtuple class of `fields`; built from FIELDS, which a type checker cannot read,
    so its attributes are typed Any."""
    return namedtuple(name, fields)


_IndexedRunBase: Any = _fields_tuple("_IndexedRun", ["id", *FIELDS, "kind", *_TIMES])


class IndexedRun(_IndexedRunBase):
    """The indexed fields of a run record, read as the record's: a tuple, as 10,000 of them
    are built in milliseconds where a RunRecord each took a tenth of a second in all. Any
    other field of a record is missing (AttributeError), never a default passed for a value;
    it cannot be saved as a record."""

    __slots__ = ()

    @property
    def trigger(self) -> Trigger:
        kind = self.kind
        if kind not in _TRIGGERS:
            _TRIGGERS[kind] = Trigger(kind)
        return _TRIGGERS[kind]


def _entry(run: RunRecord, stat: os.stat_result) -> list[Any]:
    times = [getattr(run, f) for f in _TIMES]
    values = [getattr(run, f) for f in FIELDS]
    identity = [stat.st_ino, stat.st_size, stat.st_mtime_ns]
    return identity + values + [run.trigger.kind] + [t.isoformat() if t else None for t in times]


_new = tuple.__new__


def _time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _indexed(run_id: str, entry: list[Any]) -> IndexedRun:
    """The entry's run; ValueError or TypeError when the entry is of another shape."""
    if len(entry) != _WIDTH:
        raise ValueError("an entry of another shape")
    started, finished = entry[-2], entry[-1]
    times = (_time(started), _time(finished))
    return _new(IndexedRun, (run_id, *entry[_FILE:-2], *times))  # no call per field


class RunIndex:
    """The indexed fields of the home's run records, read through the cache."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.path = store.root / INDEX_FILE
        self._entries: dict[str, list[Any]] = {}
        self._lines: dict[str, str] = {}
        self._load()
        self._changed = False

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return
        if not isinstance(data, dict) or data.get("version") != VERSION:
            return
        runs, lines = data.get("runs"), data.get("lines")
        self._entries = runs if isinstance(runs, dict) else {}
        self._lines = lines if isinstance(lines, dict) else {}

    def records(self, run_ids: Iterable[str]) -> dict[str, IndexedRun]:
        """The indexed fields (FIELDS, the trigger's kind and the times) of those of `run_ids`
        that have a readable record."""
        out: dict[str, IndexedRun] = {}
        entries = self._entries
        try:
            runs = os.open(self.store.runs_dir, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return out
        try:
            for run_id in run_ids:
                try:
                    stat = os.stat(run_id + "/run.toml", dir_fd=runs)
                except (OSError, ValueError):
                    continue
                entry = entries.get(run_id)
                if not (
                    type(entry) is list
                    and len(entry) == _WIDTH
                    and entry[0] == stat.st_ino
                    and entry[1] == stat.st_size
                    and entry[2] == stat.st_mtime_ns
                ):
                    entry = self._read(run_id)
                    if entry is None:
                        continue
                try:
                    out[run_id] = _indexed(run_id, entry)
                except (TypeError, ValueError):  # an entry of another shape: read it again
                    entry = self._read(run_id)
                    if entry is not None:
                        out[run_id] = _indexed(run_id, entry)
        finally:
            os.close(runs)
        return out

    def hand_merge_targets(self, run_ids: Iterable[str]) -> set[str]:
        """The targets of those of `run_ids` that, as the index last saw them (no record is
        checked: a guess), ended without landing and have a branch of their own."""
        at = {name: _FILE + i for i, name in enumerate(FIELDS)}
        outcome, landed, target, branch = at["outcome"], at["landed"], at["target"], at["branch"]
        isolation = at["isolation"]
        out = set()
        for run_id in run_ids:
            entry = self._entries.get(run_id)
            if type(entry) is not list or len(entry) != _WIDTH:
                continue
            if entry[outcome] is None or entry[landed] or not entry[branch]:
                continue
            if entry[isolation] != "in-place" and type(entry[target]) is str:
                out.add(entry[target])
        out.discard("")
        return out

    def _read(self, run_id: str) -> list[Any] | None:
        path = self.store.run_dir(run_id) / "run.toml"
        try:
            before = os.stat(path)
            run = self.store.load_run(run_id)
        except (OSError, UnreadableFile):
            self._entries.pop(run_id, None)
            return None  # listed without its record, as `loopd branches` always did
        entry = _entry(run, before)
        try:
            after = os.stat(path)
        except OSError:
            return entry
        same = (after.st_ino, after.st_size, after.st_mtime_ns) == tuple(entry[:_FILE])
        if same:  # else it was replaced while read: kept out of the cache
            self._entries[run_id] = entry
            self._changed = True
        return entry

    def lines(self, run_id: str, base: str, tip: str, algorithm: str) -> tuple[int, int] | None:
        """The net lines counted for the run's branch from `base` to `tip` with `algorithm`,
        None when they were not counted (or for other commits)."""
        known = self._lines.get(run_id)
        if type(known) is not str:
            return None
        parts = known.split(" ")
        if len(parts) != 5 or parts[0] != base or parts[1] != tip or parts[4] != algorithm:
            return None
        added, removed = parts[2], parts[3]
        if not (added.isdecimal() and removed.isdecimal()):
            return None
        return int(added), int(removed)

    def set_lines(
        self, run_id: str, base: str, tip: str, algorithm: str, counted: tuple[int, int]
    ) -> None:
        """Keep the net lines git counted for the run's branch (one string: "BASE TIP ADDED
        REMOVED ALGORITHM", as a string loads faster than a list)."""
        self._lines[run_id] = f"{base} {tip} {counted[0]} {counted[1]} {algorithm}"
        self._changed = True

    def save(self, keep: Iterable[str] | None = None) -> None:
        """Write the cache when it changed; `keep`: the run ids worth keeping (else all)."""
        if keep is not None:
            wanted = set(keep)
            for cache in (self._entries, self._lines):
                gone = [run_id for run_id in cache if run_id not in wanted]
                for run_id in gone:
                    del cache[run_id]
                self._changed = self._changed or bool(gone)
        if not self._changed:
            return
        data = {"version": VERSION, "runs": self._entries, "lines": self._lines}
        try:
            write_atomic(self.path, json.dumps(data, separators=(",", ":")), durable=False)
        except OSError:
            return  # a cache: the next listing reads the records again
        self._changed = False


def refresh(store: StateStore) -> None:
    """Bring the index up to date with every run record: the daemon does it hourly, so the
    first `loopd branches` after a busy night parses no record itself."""
    index = RunIndex(store)
    ids = store.run_ids()
    index.records(ids)
    index.save(ids)
