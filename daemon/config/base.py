"""What every configuration model shares: unknown keys are errors; argv, URL and name checks."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


def _argv(value: list[str]) -> list[str]:
    if any(not part.strip() for part in value):
        raise ValueError("holds an empty argument")
    return value


def _http_url(value: str) -> str:
    """An http(s) URL with a host, or empty: anything else fails only at its first use."""
    if not value:
        return value
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError:
        raise ValueError(f"{value!r} has a port that is not a number") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http:// or https:// URL with a host")
    if any(c.isspace() or ord(c) < 32 for c in value):
        raise ValueError(f"{value!r} holds a space or a control character")
    return value


QUEUE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _queue_name(value: str) -> str:
    if value and not QUEUE_NAME.match(value):
        raise ValueError(f"{value!r} is not a plain name: use letters, digits, '-', '_' and '.'")
    return value
