"""The one line each bench ends with: its figure, its target, met or not (bench/all.py reads it)."""

from __future__ import annotations

import json

PREFIX = "bench-result "


def verdict(figure: str, target: str, met: bool, smoke: bool = False) -> int:
    """Print the bench's figure against its target; the exit code (a smoke run only completes)."""
    print(PREFIX + json.dumps({"figure": figure, "target": target, "met": met, "smoke": smoke}))
    return 0 if met or smoke else 1


def read_verdict(output: str) -> dict[str, object] | None:
    """The last result line of a bench's output, None when it printed none."""
    found = None
    for line in output.splitlines():
        if line.startswith(PREFIX):
            found = json.loads(line[len(PREFIX) :])
    return found
