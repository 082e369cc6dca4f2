"""Durations (`800ms`, `30s`, `2h`, `1d`) and sizes (`100KB`, `50MB`) as configuration has them."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|KIB|MIB|GIB)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {
    "B": 1,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "KIB": 1024,
    "MIB": 1024**2,
    "GIB": 1024**3,
}


def parse_duration(value: str | int | float | timedelta) -> timedelta:
    """Parse `800ms`, `30s`, `5m`, `2h` or `1d` into a timedelta."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError("expected a duration such as '30s', '5m', '2h' or '1d'")
    if isinstance(value, (int, float)):
        return timedelta(seconds=value)
    match = _DURATION.match(str(value))
    if not match:
        raise ValueError(
            f"{value!r} is not a duration: write a number and a unit, such as '800ms', "
            "'30s', '5m', '2h' or '1d'"
        )
    return timedelta(seconds=float(match.group(1)) * _DURATION_UNITS[match.group(2)])


def parse_size(value: str | int) -> int:
    """Parse `100KB`, `50MB` (or a plain number of bytes) into bytes."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as '100KB' or '50MB'")
    if isinstance(value, int):
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(
            f"{value!r} is not a size: write a number and a unit, such as '100KB' or '50MB'"
        )
    unit = (match.group(2) or "B").upper()
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def format_duration(value: timedelta) -> str:
    """Render a timedelta the way configuration writes it."""
    total = value.total_seconds()
    for unit, seconds in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if total >= seconds and total % seconds == 0:
            return f"{int(total // seconds)}{unit}"
    return f"{int(round(total * 1000))}ms"


Duration = Annotated[
    timedelta, BeforeValidator(parse_duration), PlainSerializer(format_duration, return_type=str)
]
Size = Annotated[int, BeforeValidator(parse_size)]
