"""Durations (`800ms`, `30s`, `2h`, `1d`) and sizes (`100KB`, `50MB`) as configuration has them.

`parse_duration` and `parse_size` read a value anywhere (configuration, `--since`); they raise
ValueError, never OverflowError, and refuse what no setting could mean (negative, infinite,
over a century or a petabyte). Configuration keys narrow that with `duration(low, high)` and
`size(low, high)`: a value outside its key's range is an error naming the range.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer
from pydantic_core import PydanticCustomError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KIB|MIB|GIB|TIB)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {
    "B": 1,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
    "KIB": 1024,
    "MIB": 1024**2,
    "GIB": 1024**3,
    "TIB": 1024**4,
}
# Past these nothing is a setting, only a typo; they also keep timedelta and int() in range.
LONGEST = timedelta(days=36500)
LARGEST = 1000**5
DURATION_EXAMPLES = "'800ms', '30s', '5m', '2h' or '1d'"
SIZE_EXAMPLES = "'4096', '100KB', '50MB' or '1GB'"


class OutOfRange(ValueError):
    """A well-formed duration or size that is too large (or negative) to mean anything."""


def parse_duration(value: str | int | float | timedelta) -> timedelta:
    """Parse `800ms`, `30s`, `5m`, `2h` or `1d` (or a number of seconds) into a timedelta."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a duration such as {DURATION_EXAMPLES}")
    elif isinstance(value, (int, float)):
        seconds = float(value)
    else:
        match = _DURATION.match(value)
        if not match:
            raise ValueError(
                f"{value!r} is not a duration: write a number and a unit (ms, s, m, h, d), "
                f"such as {DURATION_EXAMPLES}"
            )
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if math.isnan(seconds):
        raise ValueError(f"{value!r} is not a duration: write one such as {DURATION_EXAMPLES}")
    if seconds < 0:
        raise OutOfRange(f"{value!r} is negative; a duration is 0 or more")
    if seconds > LONGEST.total_seconds():
        raise OutOfRange(f"{value!r} is longer than {format_duration(LONGEST)}")
    return timedelta(seconds=seconds)


def parse_size(value: str | int) -> int:
    """Parse `100KB`, `50MB` (or a plain number of bytes) into bytes."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"expected a size such as {SIZE_EXAMPLES}")
    if isinstance(value, int):
        number = value
    else:
        match = _SIZE.match(value)
        if not match:
            raise ValueError(
                f"{value!r} is not a size: write a number and a unit (B, KB, MB, GB, KiB, "
                f"MiB, GiB), such as {SIZE_EXAMPLES}"
            )
        unit = (match.group(2) or "B").upper()
        amount = float(match.group(1)) * _SIZE_UNITS[unit]
        if not math.isfinite(amount) or amount > LARGEST:
            raise OutOfRange(f"{value!r} is larger than {format_size(LARGEST)}")
        number = int(amount)
    if number < 0:
        raise OutOfRange(f"{value!r} is negative; a size is 0 or more")
    if number > LARGEST:
        raise OutOfRange(f"{value!r} is larger than {format_size(LARGEST)}")
    return number


def format_duration(value: timedelta) -> str:
    """Render a timedelta the way configuration writes it."""
    total = value.total_seconds()
    for unit, seconds in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if total >= seconds and total % seconds == 0:
            return f"{int(total // seconds)}{unit}"
    return f"{int(round(total * 1000))}ms"


def format_size(value: int) -> str:
    """Render a byte count the way configuration writes it (decimal units)."""
    for unit in ("TB", "GB", "MB", "KB"):
        if value >= _SIZE_UNITS[unit] and value % _SIZE_UNITS[unit] == 0:
            return f"{value // _SIZE_UNITS[unit]}{unit}"
    return f"{value}B"


@dataclass(frozen=True)
class Bounds:
    """The allowed range of one configuration key, kept in its annotation for errors and docs."""

    kind: str  # "duration" | "size"
    low: str
    high: str

    @property
    def text(self) -> str:
        return f"{self.low} to {self.high}"


def _bounded(bounds: Bounds, parse: Any, to_number: Any) -> BeforeValidator:
    """A validator: parse, then check the range; errors carry the range for their fix."""
    low, high = to_number(parse(bounds.low)), to_number(parse(bounds.high))
    ctx = {"kind": bounds.kind, "low": bounds.low, "high": bounds.high}

    def validate(value: Any) -> Any:
        outside = PydanticCustomError(
            f"{bounds.kind}_range",
            f"{value!r} is outside the allowed range {{low}} to {{high}}",
            ctx,
        )
        try:
            parsed = parse(value)
        except OutOfRange:
            raise outside from None
        except ValueError as exc:
            raise PydanticCustomError(f"{bounds.kind}_syntax", str(exc), ctx) from None
        if not low <= to_number(parsed) <= high:
            raise outside
        return parsed

    return BeforeValidator(validate)


def duration(low: str = "0s", high: str = "365d") -> Any:
    """A duration key allowed from `low` to `high` (written as configuration writes them)."""
    bounds = Bounds("duration", low, high)
    return Annotated[
        timedelta,
        bounds,
        _bounded(bounds, parse_duration, lambda td: td.total_seconds()),
        PlainSerializer(format_duration, return_type=str),
    ]


def size(low: str, high: str) -> Any:
    """A size key allowed from `low` to `high` bytes (written as configuration writes them)."""
    bounds = Bounds("size", low, high)
    return Annotated[int, bounds, _bounded(bounds, parse_size, lambda n: n)]


# Unbounded but overflow-safe forms, for values that are not configuration keys.
Duration = Annotated[
    timedelta, BeforeValidator(parse_duration), PlainSerializer(format_duration, return_type=str)
]
Size = Annotated[int, BeforeValidator(parse_size)]
