"""A run's aftermath (`state/runs/RUN_ID/aftermath.toml`) as plain TOML: its line in `runs`
and `show`, its `aftermath` object in their JSON; people/aftermath_view.py gives the models'
records the same text through these."""

from __future__ import annotations

import tomllib
from datetime import datetime
from pathlib import Path
from typing import Any

from daemon.regularfile import STATE_MAX, read_regular

FILE = "aftermath.toml"  # = state/aftermath.AFTERMATH_FILE (tests compare them)
WINDOW_NAMES = ("1d", "7d", "30d")


def read_plain(run_dir: Path) -> dict[str, Any] | None:
    """The run's aftermath as a table; None when it has none or it does not read."""
    try:
        data = tomllib.loads(read_regular(run_dir / FILE, cap=STATE_MAX).decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data.get("state"), str) or not isinstance(data.get("run"), str):
        return None
    return data


def _iso(value: Any) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if isinstance(value, datetime) else value


def window(data: dict[str, Any]) -> str:
    reached = [name for name in WINDOW_NAMES if name in (data.get("windows") or {})]
    return reached[-1] if reached else ""


def changed_share(data: dict[str, Any]) -> float:
    landed, kept = data.get("lines_landed", 0), data.get("lines_kept", 0)
    return max(0, landed - kept) / landed if landed else 0.0


def aftermath_object(data: dict[str, Any]) -> dict[str, Any]:
    """The `aftermath` object of `show --json`, `runs --json` and `aftermath --json`."""
    commits = [
        {
            "commit": c.get("commit", ""),
            "author": c.get("author", ""),
            "date": _iso(c.get("date")),
            "message": c.get("message", ""),
            "revert": c.get("revert", False),
            "added": c.get("added", 0),
            "removed": c.get("removed", 0),
        }
        for c in data.get("commits") or []
    ]
    return {
        "run": data["run"],
        "loop": data.get("loop", ""),
        "state": data["state"],
        "checked_at": _iso(data.get("checked_at")),
        "window": window(data),
        "windows": {k: v.get("state") for k, v in (data.get("windows") or {}).items()},
        "landed_at": _iso(data.get("landed_at")),
        "target": data.get("target", ""),
        "landed_commits": data.get("landed_commits", []),
        "lines_landed": data.get("lines_landed", 0),
        "lines_kept": data.get("lines_kept", 0),
        "changed_share": round(changed_share(data), 3),
        "commits": commits,
    }


def aftermath_text(data: dict[str, Any]) -> str:
    """The state in one line: `edited: 7 of 10 lines kept (30% changed) by Ann, after 7d`."""
    state, target = data["state"], data.get("target", "")
    text = {
        "pending": f"pending: not on {target} yet",
        "gone": f"gone: {target} was rewritten without it",
    }.get(state, "")
    if not text:
        text = f"{state}: {data.get('lines_kept', 0)} of {data.get('lines_landed', 0)} lines kept"
        if state != "kept":
            text += f" ({changed_share(data):.0%} changed)"
    people = sorted({c.get("author", "") for c in data.get("commits") or []})
    if people and state in ("edited", "reverted"):
        text += " by " + ", ".join(people)
    reached = window(data)
    return text + (f", after {reached}" if reached else "")


def line_of(run_dir: Path, commits: bool = False) -> str:
    """The run's aftermath line for `runs` ("" when it has none); `commits`: with the person's
    commits under it, reverts first, as `show` prints them."""
    data = read_plain(run_dir)
    if data is None:
        return ""
    text = aftermath_text(data)
    if commits:
        listed = sorted(data.get("commits") or [], key=lambda c: not c.get("revert", False))
        for c in listed[:20]:
            kind = "revert" if c.get("revert") else f"+{c.get('added', 0)}/-{c.get('removed', 0)}"
            text += f"\n  {c.get('commit', '')[:12]} {c.get('author', '')} ({kind}): "
            text += str(c.get("message", ""))
    return text


def object_of(run_dir: Path) -> dict[str, Any] | None:
    """The run's `aftermath` object for JSON; None when it has none."""
    data = read_plain(run_dir)
    return aftermath_object(data) if data is not None else None
