"""The run index: the few fields of each run record that a listing of thousands of runs reads
(`loopd branches`), cached in `state/runs-index.json`.

Parsing a `run.toml` costs about a millisecond (TOML in pure Python): 10,000 of them are
seconds. The index keeps, per run, those fields and the identity of the `run.toml` they came
from (inode, size, modification time); a stat tells whether the file changed since, and only a
changed or new record is read again. Nothing writes the index but its readers, so a record
saved by any process (the daemon, `loopd once`, a CLI command) is seen at the next read; a lost
or damaged index costs one slow listing, never a wrong one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from daemon.state.atomic import write_atomic
from daemon.state.records import RunRecord, RunTrigger
from daemon.state.store import StateStore, UnreadableFile

INDEX_FILE = "runs-index.json"
VERSION = 2
# What the listings read: the outcome, the landing state (people/landstate.py) and what
# noticing a hand merge needs (landing/handmerge.py).
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


def _identity(stat: os.stat_result) -> list[Any]:
    return [stat.st_ino, stat.st_size, stat.st_mtime_ns]


def _entry(run: RunRecord, identity: list[Any]) -> list[Any]:
    times = [getattr(run, f) for f in _TIMES]
    values = [getattr(run, f) for f in FIELDS]
    return identity + values + [run.trigger.kind] + [t.isoformat() if t else None for t in times]


_TRIGGERS: dict[str, RunTrigger] = {}


def _partial(run_id: str, entry: list[Any]) -> RunRecord:
    """A RunRecord holding only the indexed fields, its id, trigger kind and times: reading any
    other field raises AttributeError (and so does saving it), never a default passed for a
    value. Built as model_construct builds a record, without its fifty defaults (seconds at
    10,000 records)."""
    if len(entry) != _WIDTH:
        raise ValueError("an entry of another shape")
    values = dict(zip(FIELDS, entry[_FILE : _FILE + len(FIELDS)], strict=True))
    kind = entry[_FILE + len(FIELDS)]
    for field, text in zip(_TIMES, entry[-len(_TIMES) :], strict=True):
        values[field] = datetime.fromisoformat(text) if text else None
    if kind not in _TRIGGERS:
        _TRIGGERS[kind] = RunTrigger.model_construct(kind=kind)
    values["id"], values["trigger"] = run_id, _TRIGGERS[kind]
    record = RunRecord.__new__(RunRecord)
    object.__setattr__(record, "__dict__", values)
    object.__setattr__(record, "__pydantic_fields_set__", set(values))
    object.__setattr__(record, "__pydantic_extra__", None)
    object.__setattr__(record, "__pydantic_private__", None)
    return record


class RunIndex:
    """The indexed fields of the home's run records, read through the cache."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.path = store.root / INDEX_FILE
        self._entries: dict[str, list[Any]] = self._load()
        self._changed = False

    def _load(self) -> dict[str, list[Any]]:
        try:
            data = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("version") != VERSION:
            return {}
        runs = data.get("runs")
        return runs if isinstance(runs, dict) else {}

    def records(self, run_ids: Iterable[str]) -> dict[str, RunRecord]:
        """Partial records (only FIELDS and the times hold values) of those of `run_ids` that
        have a readable record."""
        out = {}
        runs = str(self.store.runs_dir)
        for run_id in run_ids:
            try:
                identity = _identity(os.stat(os.path.join(runs, run_id, "run.toml")))
            except OSError:
                continue
            entry = self._entries.get(run_id)
            if not isinstance(entry, list) or entry[:_FILE] != identity:
                entry = self._read(run_id)
                if entry is None:
                    continue
            try:
                out[run_id] = _partial(run_id, entry)
            except (IndexError, KeyError, TypeError, ValueError):
                self._entries.pop(run_id, None)  # an entry of another shape: read it again
                entry = self._read(run_id)
                if entry is not None:
                    out[run_id] = _partial(run_id, entry)
        return out

    def _read(self, run_id: str) -> list[Any] | None:
        path = self.store.run_dir(run_id) / "run.toml"
        try:
            before = _identity(os.stat(path))
            run = self.store.load_run(run_id)
        except (OSError, UnreadableFile):
            return None  # listed without its record, as `loopd branches` always did
        entry = _entry(run, before)
        try:
            after = _identity(os.stat(path))
        except OSError:
            return entry
        if after == before:  # else it was replaced while read: kept out of the cache
            self._entries[run_id] = entry
            self._changed = True
        return entry

    def save(self, keep: Iterable[str] | None = None) -> None:
        """Write the cache when it changed; `keep`: the run ids worth keeping (else all)."""
        if keep is not None:
            wanted = set(keep)
            gone = [run_id for run_id in self._entries if run_id not in wanted]
            for run_id in gone:
                del self._entries[run_id]
            self._changed = self._changed or bool(gone)
        if not self._changed:
            return
        data = {"version": VERSION, "runs": self._entries}
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
