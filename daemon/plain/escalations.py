"""`state/escalations/*.md` read without the models: each file's front matter as the
`Escalation` model (people/escalation_file.py) would make it, as a dict of its fields.

An escalation file starts with TOML front matter between `+++` lines. The model's reading
and this one share the file reading (`escalation_paths`, `read_front_matter`); this one
then checks each key as the model's validation does, for the values loopd writes and the
ones pydantic certainly refuses: a file the model would skip is skipped, every field the
file leaves out takes the model's default (tests/test_plain_escalations.py holds FIELDS to
the model's fields). A value that only pydantic's conversions can tell (a time with no
offset, a number given as text, ...) raises `Unsure` (plain/records.py) for the whole
reading: the caller takes the full path, which reads it with the model.
"""

from __future__ import annotations

import tomllib
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

from daemon.plain.generated import ESCALATION, ESCALATION_REQUIRED
from daemon.plain.records import Unsure, listing
from daemon.regularfile import STATE_MAX, read_regular

# The model's fields in its order: name -> (kind, default), generated from the model
# (daemon/plain/tables.py). A kind is "str", "int" (also `int | None`), "bool", "datetime"
# (also `datetime | None`) or the strings of a Literal.
FIELDS = ESCALATION
REQUIRED = ESCALATION_REQUIRED  # a field with no default: a file without it is skipped


def split_front_matter(text: str) -> tuple[str, str] | None:
    """An escalation file's text as (front matter TOML, body); None when it has none."""
    if not text.startswith("+++\n"):
        return None
    end = text.find("\n+++\n", 3)
    if end < 0:
        return None
    return text[4 : end + 1], text[end + 5 :]


def read_front_matter(path: Path) -> dict[str, Any] | None:
    """The TOML table of one escalation file's front matter; None when it is not a file
    loopd wrote (unreadable, not UTF-8, no front matter, not TOML): such files are skipped."""
    try:
        text = read_regular(path, cap=STATE_MAX).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    parts = split_front_matter(text)
    if parts is None:
        return None
    try:
        return tomllib.loads(parts[0])
    except tomllib.TOMLDecodeError:
        return None


def escalation_paths(state_dir: Path) -> list[Path]:
    """The escalation files of `state_dir/escalations/`, oldest first (by run id)."""
    folder = state_dir / "escalations"
    return [folder / name for name in listing(folder) if name.endswith(".md")]


def escalation_file(state_dir: Path, run_id: str) -> Path | None:
    """The escalation file of run `run_id`; None when there is none (or the id would name a
    file outside `escalations/`, or a hidden one)."""
    path = state_dir / "escalations" / f"{run_id}.md"
    if "/" in run_id or run_id.startswith(".") or not path.is_file():
        return None
    return path


def _valid(kind: Any, value: Any) -> bool:
    """Whether the model takes `value` as it is (True) or refuses it (False); Unsure when
    pydantic would convert it (a naive time, a date, a number as text, a bool as a number)."""
    if isinstance(kind, tuple):  # a Literal of strings: the very string, nothing converted
        return isinstance(value, str) and value in kind
    if kind == "str":  # pydantic makes text of no other TOML value
        return isinstance(value, str)
    if isinstance(value, (list, dict, time)):  # no scalar field takes these
        return False
    if kind == "datetime":
        if isinstance(value, datetime) and value.tzinfo is not None:
            return True
        if isinstance(value, bool):
            return False
        raise Unsure(value)  # naive, a date, a number (a Unix time) or text
    if isinstance(value, date):  # a date or a time of day is neither an int nor a bool
        return False
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        return True
    if kind == "bool" and isinstance(value, bool):
        return True
    raise Unsure(value)  # a float, text, a bool as a number or a number as a bool


def escalation(data: dict[str, Any]) -> dict[str, Any] | None:
    """Every field of one front matter as the model has it, defaults filled in; None when
    the model refuses it (a required field missing, a value of the wrong type). Unsure when
    only the model can tell."""
    fields: dict[str, Any] = {}
    unsure = False
    for name, (kind, default) in FIELDS.items():
        if name not in data:
            if default is REQUIRED:
                return None
            fields[name] = default
            continue
        try:
            if not _valid(kind, data[name]):
                return None
        except Unsure:
            unsure = True  # unless another field is refused: then the file is skipped
        fields[name] = data[name]
    if unsure:
        raise Unsure(data.get("run"))
    return fields


def list_escalations(state_dir: Path) -> list[dict[str, Any]]:
    """Every escalation of `state_dir` loopd can read, oldest first, each a dict of the
    model's fields (the files the model skips left out). Unsure: only the model can tell."""
    out = []
    for path in escalation_paths(state_dir):
        data = read_front_matter(path)
        fields = escalation(data) if data is not None else None
        if fields is not None:
            fields["id"] = fields["id"] or path.stem  # as the model's reading fills it in
            out.append(fields)
    return out


def open_escalations(state_dir: Path, loop: str | None = None) -> list[dict[str, Any]]:
    """The escalations waiting for a person (of `loop`, when given), oldest first, each a
    dict of the model's fields. Unsure: only the model can tell."""
    every = list_escalations(state_dir)
    return [e for e in every if e["status"] == "open" and (loop is None or e["loop"] == loop)]


def json_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields as `--json` prints the model (`model_dump(mode="json")`): times in ISO 8601
    with their own offset, `Z` for UTC."""
    return {name: _json_time(v) if isinstance(v, datetime) else v for name, v in fields.items()}


def _json_time(value: datetime) -> str:
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text
