"""`state/pruned-runs.jsonl` as lines, without the model of a line (state/pruned.py has it):
where it is, its lines last first, and what `loopd show` says of a pruned run. Imports no
pydantic, so the read commands' plain path (daemon/plain/) reads it too."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

PRUNED_INDEX = "pruned-runs.jsonl"
TAIL_CHUNK = 1 << 16


def index_path(root: Path) -> Path:
    return root / PRUNED_INDEX


def lines_backwards(path: Path) -> Iterator[bytes]:
    """The file's lines, last first, read in chunks from its end."""
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        return
    with fh:
        end = fh.seek(0, os.SEEK_END)
        rest = b""
        while end > 0:
            start = max(0, end - TAIL_CHUNK)
            fh.seek(start)
            chunk = fh.read(end - start) + rest
            end = start
            lines = chunk.split(b"\n")
            rest = lines.pop(0) if end > 0 else b""
            for raw in reversed(lines):
                if raw.strip():
                    yield raw
        if rest.strip():
            yield rest


def pruned_line(pruned: datetime, retain_days: int) -> str:
    """What `loopd show` says of a run pruned at `pruned`."""
    when = pruned.strftime("%Y-%m-%d")
    kept = f" after {retain_days} days" if retain_days else ""
    return f"pruned on {when}{kept} (retain_days): its folder and files are gone"
