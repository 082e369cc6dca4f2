"""A field of an agent's JSON line, in the shape it should have: a program's stream may send
anything, and its reader never trusts that a field is the object or array it documents."""

from __future__ import annotations

from typing import Any


def as_object(value: Any) -> dict[str, Any]:
    """A stream field that should be a JSON object: itself when it is one, else empty."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """A stream field that should be a JSON array: itself when it is one, else empty."""
    return value if isinstance(value, list) else []
