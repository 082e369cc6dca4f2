"""Escalation files' front matter read as plain TOML (interim: the open ones, for status)."""

from __future__ import annotations

import tomllib
from datetime import datetime
from pathlib import Path
from typing import Any

from daemon.plain.records import Unsure, listing
from daemon.regularfile import STATE_MAX, read_regular


def open_escalations(state_dir: Path) -> list[dict[str, Any]]:
    """The open escalations, oldest first: run, loop, task, count, latest_run."""
    folder = state_dir / "escalations"
    out = []
    for name in listing(folder):
        if not name.endswith(".md"):
            continue
        try:
            text = read_regular(folder / name, cap=STATE_MAX).decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if not text.startswith("+++\n") or text.find("\n+++\n", 3) < 0:
            continue
        try:
            meta = tomllib.loads(text[4 : text.find("\n+++\n", 3) + 1])
        except tomllib.TOMLDecodeError:
            continue
        if not all(isinstance(meta.get(k), str) for k in ("run", "loop", "task")):
            raise Unsure(name)
        if not isinstance(meta.get("escalated"), datetime):
            raise Unsure(name)
        if meta.get("status", "open") == "open":
            out.append(
                {
                    "run": meta["run"],
                    "loop": meta["loop"],
                    "task": meta["task"],
                    "count": meta.get("count", 1),
                    "latest_run": meta.get("latest_run", ""),
                }
            )
    return out
