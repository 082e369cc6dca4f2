"""A run's `run.toml`, the queue and the pruned runs' lines read as plain TOML and JSON: each
field checked against the kind its model declares (plain/generated.py), the model's default
where the file leaves it out (state/store.py strips None values), so `loopd runs` and
`loopd show` print what the models would without importing them.

A value of another kind, a required field missing or a file that does not parse raises
`Unsure`: the models may read it otherwise (an older record format, a value they coerce) or
report it, so the command takes its full path.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from daemon.plain.generated import PRUNED, QUEUE, REQUIRED, RUN, Spec
from daemon.plain.records import Unsure, json_time, listing, read_file
from daemon.state.prunedindex import index_path, lines_backwards
from daemon.state.runids import listed_run_ids

MERGED_KEPT = 20  # state/queuefile.MERGED_KEPT: the merged triggers a queued run keeps


class View:
    """A checked table read as the model's attributes (`run.trigger.kind`), for the views
    that print a model (cli/runlines.py) to print it alike."""

    __slots__ = ("data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def __getattr__(self, name: str) -> Any:
        try:
            value = self.data[name]
        except KeyError:
            raise AttributeError(name) from None
        return _view(value)


def _view(value: Any) -> Any:
    if isinstance(value, dict):
        return View(value)
    if isinstance(value, list):
        return [_view(v) for v in value]
    return value


def checked(data: Any, spec: Spec, from_json: bool = False) -> dict[str, Any]:
    """`data` as the model of `spec` holds it: its fields in order, defaults filled in, keys
    the model does not know left out (its `extra="ignore"`)."""
    if not isinstance(data, dict):
        raise Unsure("not a table")
    out = {}
    for name, (kind, default) in spec.items():
        if name not in data:
            if default == REQUIRED:
                raise Unsure(f"{name}: missing")
            out[name] = list(default) if isinstance(default, list) else default
            continue
        out[name] = _value(data[name], kind, from_json, name)
    return out


def _value(value: Any, kind: Any, from_json: bool, name: str) -> Any:  # noqa: PLR0911
    if isinstance(kind, dict):
        return checked(value, kind, from_json)
    if isinstance(kind, tuple) and kind[0] == "opt":
        return None if value is None else _value(value, kind[1], from_json, name)
    if isinstance(kind, tuple) and kind[0] == "list":
        if not isinstance(value, list):
            raise Unsure(f"{name}: not a list")
        return [_value(v, kind[1], from_json, name) for v in value]
    if isinstance(kind, tuple):  # a Literal: one of these strings
        if isinstance(value, str) and value in kind:
            return value
    elif kind == "datetime":
        return _datetime(value, from_json, name)
    elif kind == "float":
        if type(value) in (int, float):
            return float(value)
    elif kind == "strings":
        if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
            return value
    elif type(value) is {"str": str, "int": int, "bool": bool, "table": dict}[kind]:
        return value
    raise Unsure(f"{name}: {value!r} is not {kind}")


def _datetime(value: Any, from_json: bool, name: str) -> datetime:
    if isinstance(value, datetime):
        return value
    if from_json and isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            pass
    raise Unsure(f"{name}: {value!r} is not a time")


def read_table(path: Path) -> dict[str, Any] | None:
    """A state file's TOML, read as the store reads it; None when it does not exist."""
    try:
        return read_file(path)
    except FileNotFoundError:
        return None


def read_run(run_dir: Path) -> dict[str, Any] | None:
    """The run's record as RunRecord holds it; None when it has none (yet)."""
    data = read_table(run_dir / "run.toml")
    return None if data is None else checked(data, RUN)


def run_ids(runs_dir: Path, loop: str | None = None) -> list[str]:
    """Run ids, oldest first, as StateStore.run_ids lists them."""
    return listed_run_ids(runs_dir, loop)


def live_runs(state_dir: Path) -> list[str]:
    """The runs with a live marker, as StateStore.live_runs lists them."""
    return listing(state_dir / "live")


def pending_runs(state_dir: Path) -> list[dict[str, Any]]:
    """The queue's pending runs as QueueFile holds them (its validators applied)."""
    data = read_table(state_dir / "queue.toml")
    if data is None:
        return []
    pending = checked(data, QUEUE)["pending"]
    for p in pending:
        for name in (p["id"], p["loop"]):
            if not name or "/" in name or name.startswith("."):
                raise Unsure(f"{name!r} is not a run id or loop name")
        p["merged_count"] = max(p["merged_count"], len(p["merged"]))
        p["merged"] = p["merged"][-MERGED_KEPT:]
    return pending


def _pruned_lines(state_dir: Path) -> Iterator[dict[str, Any]]:
    for raw in lines_backwards(index_path(state_dir)):
        try:
            yield checked(json.loads(raw), PRUNED, from_json=True)
        except ValueError:  # a line cut by a crash: the models skip it
            raise Unsure("a pruned line that does not parse") from None


def newest_pruned(state_dir: Path, loop: str | None, limit: int) -> list[dict[str, Any]]:
    """As state/pruned.newest_pruned: up to `limit` pruned runs, newest first, each once."""
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    if limit <= 0:
        return out
    for entry in _pruned_lines(state_dir):
        if entry["run"] in seen or loop not in (None, entry["loop"]):
            continue
        seen.add(entry["run"])
        out.append(entry)
        if len(out) >= limit:
            break
    return out


def find_pruned(state_dir: Path, run_id: str) -> dict[str, Any] | None:
    """As state/pruned.find_pruned: the last line of `run_id`, when it was pruned."""
    needle = run_id.encode()
    for raw in lines_backwards(index_path(state_dir)):
        if needle in raw:
            try:
                entry = checked(json.loads(raw), PRUNED, from_json=True)
            except ValueError:
                raise Unsure("a pruned line that does not parse") from None
            if entry["run"] == run_id:
                return entry
    return None


def jsonable(value: Any) -> Any:
    """What pydantic's `model_dump(mode="json")` makes of a checked table: times as ISO 8601,
    UTC ones ending in Z."""
    if isinstance(value, datetime):
        return json_time(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    return value
