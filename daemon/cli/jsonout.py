"""What `--json` prints: one format for every command, times as ISO 8601 UTC with Z.

Imports nothing of loopd, so the read commands' plain path prints JSON without the models."""

from __future__ import annotations

import json
import sys
from datetime import UTC, date, datetime
from typing import Any


def json_value(value: Any) -> Any:
    """What `--json` prints for a value JSON has no type for: times as ISO 8601 UTC with Z,
    the form state files and pydantic's JSON use, so every command prints one format."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, default=json_value, indent=2)
    sys.stdout.write("\n")
