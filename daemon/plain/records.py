"""State files read as plain TOML, in the shapes the models give them: each field's default
filled in, times as the models' JSON writes them, and a file the models would refuse told
apart (`Unsure`), so the plain path hands it to the full one, which says what is wrong.

The tables of fields and the vocabularies are generated from state/records.py's models
(daemon/plain/generated.py, by `python -m daemon.plain.tables`; `--check` in the tests), so they
cannot drift apart.
"""

from __future__ import annotations

import os
import tomllib
from datetime import datetime
from pathlib import Path
from typing import Any

# The tables and vocabularies, generated from the models (daemon/plain/tables.py).
from daemon.plain.generated import (
    BUDGET_STATUS,
    DAEMON_STATUS,
    LOOP_STATUS,
    OUTCOMES,
    PHASES,
    STATE_USAGE,
    VERIFIER_STATUS,
)
from daemon.regularfile import STATE_MAX, NotRegular, read_regular


class Unsure(Exception):
    """A file the plain path cannot read as the models would: the full path answers."""


# field -> (the types its value may have, its default)
Spec = dict[str, tuple[tuple[type, ...], Any]]


def read_file(path: Path) -> dict[str, Any]:
    """A state file's TOML table; FileNotFoundError when absent, Unsure when not plain TOML
    or not a regular file (the models' reader names the problem)."""
    try:
        return tomllib.loads(read_regular(path, cap=STATE_MAX).decode("utf-8"))
    except FileNotFoundError:
        raise
    except (NotRegular, OSError, ValueError) as exc:  # TOMLDecodeError, UnicodeDecodeError
        raise Unsure(str(path)) from exc


def conform(data: Any, spec: Spec, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """`data` with the spec's defaults filled in and other keys dropped (the models ignore
    them); Unsure when a value has another type or a required key is missing."""
    if not isinstance(data, dict):
        raise Unsure("not a table")
    out: dict[str, Any] = {}
    for field, (types, default) in spec.items():
        if field not in data:
            if field in required:
                raise Unsure(f"{field}: missing")
            out[field] = list(default) if isinstance(default, list) else default
            continue
        value = data[field]
        # bool is an int to isinstance; the models tell them apart.
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise Unsure(f"{field}: {type(value).__name__}")
        out[field] = value
    return out


def as_json(values: dict[str, Any]) -> dict[str, Any]:
    """The values as the models' JSON gives them: times in ISO 8601, UTC as Z."""
    return {k: json_time(v) if isinstance(v, datetime) else v for k, v in values.items()}


def json_time(when: datetime) -> str:
    text = when.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def read_status(state_dir: Path) -> dict[str, Any]:
    """status.toml as cli/statusdata.StatusReader.status gives it; the defaults when absent."""
    try:
        data = read_file(state_dir / "status.toml")
    except FileNotFoundError:
        data = {}
    daemon = conform(data.get("daemon", {}), DAEMON_STATUS)
    if not all(isinstance(w, str) for w in daemon["warnings"]):
        raise Unsure("daemon.warnings")
    loops = data.get("loops", {})
    if not isinstance(loops, dict):
        raise Unsure("loops")
    shown = {}
    for name, entry in loops.items():
        values = conform(entry, LOOP_STATUS)
        if values["phase"] not in PHASES:
            raise Unsure(f"loops.{name}.phase")
        shown[name] = as_json(values)
    parts: dict[str, Any] = {"daemon": daemon, "loops": shown}
    for part, spec in (("verifier", VERIFIER_STATUS), ("budget", BUDGET_STATUS)):
        value = data.get(part)
        parts[part] = None if value is None else as_json(conform(value, spec))
    return parts


def read_usage(state_dir: Path) -> dict[str, Any] | None:
    """state/usage.toml as JSON, None when absent or not readable (as the housekeeper's)."""
    try:
        values = conform(read_file(state_dir / "usage.toml"), STATE_USAGE, ("measured",))
    except (FileNotFoundError, Unsure):
        return None
    if not all(isinstance(k, str) and type(v) is int for k, v in values["loops"].items()):
        return None
    return as_json(values)


def run_outline(state_dir: Path, run_id: str) -> dict[str, Any]:
    """What `status` reads of a run record: its loop, phase, outcome and attempts' count.
    FileNotFoundError when it has none; Unsure when the models may refuse it."""
    data = read_file(state_dir / "runs" / run_id / "run.toml")
    loop, phase, outcome = data.get("loop"), data.get("phase", "preparing"), data.get("outcome")
    attempts = data.get("attempts", [])
    if not isinstance(loop, str) or not isinstance(phase, str) or phase not in PHASES:
        raise Unsure("loop or phase")
    if not isinstance(attempts, list) or outcome not in (*OUTCOMES, None):
        raise Unsure("attempts or outcome")
    if data.get("id", run_id) != run_id:
        raise Unsure("id")
    return {"id": run_id, "loop": loop, "phase": phase, "outcome": outcome, "n": len(attempts)}


def listing(folder: Path) -> list[str]:
    """The names in `folder` not starting with a dot, sorted; [] when it does not exist."""
    try:
        return sorted(n for n in os.listdir(folder) if not n.startswith("."))
    except FileNotFoundError:
        return []
