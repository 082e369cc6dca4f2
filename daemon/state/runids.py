"""Run ids as `runs/` lists them: `YYYYMMDDTHHMMSSZ-LOOP-xxxx`, sorting by time. Imports no
model, so the read commands' plain path lists runs as StateStore does."""

from __future__ import annotations

import os
from pathlib import Path


def loop_of(run_id: str) -> str:
    """The loop in `YYYYMMDDTHHMMSSZ-LOOP-xxxx`."""
    return run_id[17:].rsplit("-", 1)[0]


def listed_run_ids(runs_dir: Path, loop: str | None = None) -> list[str]:
    """The run ids in `runs_dir` (of `loop`), oldest first; [] when it does not exist."""
    try:
        names = os.listdir(runs_dir)
    except FileNotFoundError:
        return []
    ids = sorted(n for n in names if not n.startswith("."))
    return ids if loop is None else [i for i in ids if loop_of(i) == loop]
