"""What a validation error in a configuration or rule file means, and what to write instead.

Every problem names the key and says what to do: the key it was probably meant to be, the
allowed values, the range, or the expected type with an example taken from the model
(a field's `examples`, else its default).
"""

from __future__ import annotations

import difflib
import json
import shlex
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from daemon.units import Bounds

REFERENCE = "docs/configuration.md"


@dataclass
class ConfigError:
    """One problem in one file: where, which key, what to do."""

    file: Path
    key: str
    message: str
    fix: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.key}" if self.key else str(self.file)
        return f"{where}: {self.message}. Fix: {self.fix}"


@dataclass
class Problem:
    """One explained validation error, not yet tied to a file."""

    key: str
    message: str
    fix: str


# What a value of each pydantic type looks like in TOML.
_TYPE_WORDS = {
    "string": "a string in double quotes",
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
    "list": "a list in [ ]",
    "dict": "a table",
    "model": "a table",
    "datetime": "a date and time such as 2026-01-31T02:00:00Z",
}
# Keys whose value is an argv list: a string given instead is split as a shell would.
_ARGV_KEYS = ("command", "args")
# Fixes for values a field validator refused, by key: what a valid one looks like.
_VALUE_FIXES = {
    "schedule": (
        'write five fields "minute hour day-of-month month day-of-week", e.g. '
        'schedule = ["0 2 * * *"] for 02:00 every day (cron syntax: ' + REFERENCE + ")"
    ),
    "timezone": 'use an IANA time zone name, e.g. timezone = "Europe/Berlin" or "UTC"',
    "webhook": "write the whole URL with http:// or https:// and a host, e.g. {example}",
    "base_url": "write the whole URL with http:// or https:// and a host, e.g. {example}",
    "command": (
        "write the program and each argument as its own non-empty string, e.g. {example}; "
        "it never runs through a shell"
    ),
    "trigger_patterns": (
        "write a Python regular expression in single quotes, e.g. "
        "trigger_patterns = ['(?i)\\breview\\b']"
    ),
    "id": 'write r-, four or more digits and a slug, e.g. id = "r-0042-grep-count"',
}


def toml_value(value: Any) -> str:
    """A value as TOML writes it inline (strings, numbers, booleans, lists, tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, BaseModel):
        return toml_value(value.model_dump())
    if isinstance(value, Mapping):
        inner = ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


def _strip(annotation: Any) -> Any:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def _is_model(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel)


@dataclass
class _Table:
    """A `dict[str, X]` field: its keys are names, its values are X."""

    value: Any


def _descend(annotation: Any) -> Any:
    annotation = _strip(annotation)
    if _is_model(annotation):
        return annotation
    origin = get_origin(annotation)
    if origin is dict:
        return _Table(_descend(get_args(annotation)[1]))
    if origin is list:
        return _descend(get_args(annotation)[0])
    return None


@dataclass
class _Place:
    """Where a location points: the model holding the key, the field, its section."""

    holder: type[BaseModel] | None
    field: FieldInfo | None
    name: str
    section: str  # "" at the top of the file, else "limits" or "agents.qwen"


def _locate(model: type[BaseModel], loc: tuple[Any, ...]) -> _Place:
    current: Any = model
    place = _Place(model, None, "", "")
    path: list[str] = []
    for part in loc:
        if isinstance(part, int):
            continue
        if isinstance(current, _Table):
            path.append(str(part))
            current = current.value
            continue
        if not _is_model(current):
            break
        place = _Place(current, current.model_fields.get(str(part)), str(part), ".".join(path))
        if place.field is None:
            break
        path.append(str(part))
        current = _descend(place.field.annotation)
    return place


def key_path(loc: tuple[Any, ...]) -> str:
    """`("agents", "qwen", "args", 0)` as `agents.qwen.args[0]`."""
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int):
            parts[-1] = f"{parts[-1]}[{part}]" if parts else f"[{part}]"
        else:
            parts.append(str(part))
    return ".".join(parts)


def example(place: _Place) -> str:
    """`name = value` (with its section) for a key, from its examples or its default."""
    info = place.field
    value: Any = None
    if info is not None:
        if info.examples:
            value = info.examples[0]
        elif info.default not in (PydanticUndefined, None, "", [], {}):
            value = info.default
    if value is None or _is_model(type(value)):
        return ""
    line = f"{place.name} = {toml_value(value)}"
    return f"{line} under [{place.section}]" if place.section else line


def literal_values(annotation: Any) -> list[Any]:
    """The values a Literal (possibly inside list[...] or Optional) allows."""
    annotation = _strip(annotation)
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    if get_origin(annotation) in (list, Union, types.UnionType):
        return [v for arg in get_args(annotation) for v in literal_values(arg)]
    return []


def _number(value: Any) -> str:
    """A bound as TOML may write it: `10_000_000` for large whole numbers."""
    return f"{value:_}" if isinstance(value, int) and abs(value) >= 10_000 else str(value)


def _number_range(info: FieldInfo | None) -> tuple[str | None, str | None]:
    low = high = None
    for item in info.metadata if info else []:
        if isinstance(item, annotated_types.Ge):
            low = _number(item.ge)
        elif isinstance(item, annotated_types.Gt):
            low = f"more than {_number(item.gt)}"
        elif isinstance(item, annotated_types.Le):
            high = _number(item.le)
        elif isinstance(item, annotated_types.Lt):
            high = f"less than {_number(item.lt)}"
    return low, high


def _bounds(info: FieldInfo | None) -> Bounds | None:
    return next((m for m in info.metadata if isinstance(m, Bounds)), None) if info else None


def _described(value: Any) -> str:
    kind = {bool: "a boolean", int: "a number", float: "a number", str: "a string"}.get(
        type(value), "a list" if isinstance(value, list) else "a table"
    )
    shown = toml_value(value)
    return f"{kind} ({shown})" if len(shown) <= 40 else kind


def did_you_mean(name: str, candidates: list[str]) -> str:
    """The candidate `name` was most likely meant to be, or ""."""
    folded = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(name.lower().replace("-", "_"), list(folded), 1, 0.6)
    return folded[close[0]] if close else ""


def _unknown_key(place: _Place, elsewhere: Mapping[str, str], reference: str) -> Problem:
    holder = place.holder
    names = list(holder.model_fields) if holder else []
    guess = did_you_mean(place.name, names)
    if guess:
        return Problem("", "unknown key", f"did you mean `{guess}`? ({reference} lists every key)")
    if place.name in elsewhere:
        return Problem("", "unknown key here", f"move it: it belongs {elsewhere[place.name]}")
    where = f"[{place.section}]" if place.section else "this file"
    known = ", ".join(names)
    return Problem(
        "", "unknown key", f"remove it; the keys of {where} are: {known} (see {reference})"
    )


def _type_problem(err: Mapping[str, Any], place: _Place) -> Problem:
    word = _TYPE_WORDS.get(err["type"].split("_")[0], "a value of another type")
    message = f"expected {word}, got {_described(err['input'])}"
    if err["type"] == "list_type" and isinstance(err["input"], str) and err["input"].strip():
        words = [err["input"]]
        if place.name in _ARGV_KEYS:
            # A command written as one string: show it as the argv list it was meant to be.
            try:
                words = shlex.split(err["input"])
            except ValueError:
                words = err["input"].split()
        return Problem("", message, f"write it as a list: {place.name} = {toml_value(words)}")
    if err["type"] in ("model_type", "model_attributes_type", "dict_type") and place.field:
        section = _descend(place.field.annotation)
        if _is_model(section):
            name = f"{place.section}.{place.name}" if place.section else place.name
            return Problem(
                "", message, f"write it as a section: a line [{name}] with its keys below it"
            )
    shown = example(place)
    fix = f"write {word}, e.g. {shown}" if shown else f"write {word}"
    return Problem("", message, fix)


def explain_one(
    model: type[BaseModel],
    err: Mapping[str, Any],
    elsewhere: Mapping[str, str] | None = None,
    reference: str = REFERENCE,
) -> Problem:
    """One pydantic error as a message and a fix that says what to write."""
    loc = tuple(err["loc"])
    place = _locate(model, loc)
    kind = err["type"]
    shown = example(place)
    for_example = f", e.g. {shown}" if shown else ""
    msg = str(err["msg"]).removeprefix("Value error, ")
    if kind == "extra_forbidden":
        problem = _unknown_key(place, elsewhere or {}, reference)
    elif kind == "missing":
        problem = Problem("", "this required key is missing", f"add it{for_example}")
    elif kind in ("literal_error", "enum"):
        allowed = literal_values(place.field.annotation) if place.field else []
        values = " | ".join(toml_value(v) for v in allowed) or err.get("ctx", {}).get(
            "expected", ""
        )
        problem = Problem("", f"{toml_value(err['input'])} is not allowed", f"use one of {values}")
    elif kind.endswith("_range") or kind.endswith("_syntax"):
        ctx = err.get("ctx", {})
        word = ctx.get("kind", "value")
        problem = Problem(
            "",
            msg,
            f"use a {word} from {ctx.get('low')} to {ctx.get('high')}{for_example} "
            f"({word}s: {reference})",
        )
    elif kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        low, high = _number_range(place.field)
        span = (
            f"from {low} to {high}"
            if low is not None and high is not None
            else f"of at least {low}"
            if low is not None
            else f"of at most {high}"
        )
        problem = Problem(
            "", msg.replace("Input should be", "must be"), f"use a number {span}{for_example}"
        )
    elif kind.endswith("_type") or kind.endswith("_parsing") or kind == "int_from_float":
        problem = _type_problem(err, place)
    elif kind == "value_error":
        fix = _VALUE_FIXES.get(place.name, "").replace("{example}", shown) or (
            f"write it like this: {shown}" if shown else ""
        )
        problem = Problem("", msg, fix or f"see {reference} for what {place.name} takes")
    else:
        fix = f"write it like this: {shown}" if shown else f"see {reference} for this key"
        problem = Problem("", msg, fix)
    problem.key = key_path(loc)
    return problem


def explain(
    model: type[BaseModel],
    exc: ValidationError,
    elsewhere: Mapping[str, str] | None = None,
    reference: str = REFERENCE,
) -> list[Problem]:
    """Every error of `exc` (raised validating `model`) explained; `reference` documents it."""
    return [explain_one(model, err, elsewhere, reference) for err in exc.errors()]


def bounds_of(info: FieldInfo) -> str:
    """A field's allowed range as the reference writes it, or ""."""
    bounds = _bounds(info)
    if bounds:
        return bounds.text
    low, high = _number_range(info)
    if low is None and high is None:
        return ""
    return f"{low if low is not None else ''} to {high if high is not None else ''}".strip()
