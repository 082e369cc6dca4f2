"""What a run's `setup` made in its tree, as its record keeps it: paths and their excludes."""

from __future__ import annotations

import os
from pathlib import Path

from daemon.state.records import RunRecord


def setup_paths(run: RunRecord, tree: Path) -> list[str]:
    """The paths setup made in `tree`, relative to it, as the run's record keeps them."""
    out = []
    for path in run.exposure.read_only if run.exposure else []:
        rel = os.path.relpath(path, tree)
        if not rel.startswith(".."):
            out.append(rel)
    return out


def anchored(rel: str) -> str:
    """`rel` as a gitignore pattern matching that one path from the top of the tree."""
    escaped = "".join("\\" + ch if ch in "\\*?[!#" else ch for ch in rel)
    if escaped.endswith(" "):
        escaped = escaped[:-1] + "\\ "
    return "/" + escaped


def setup_excludes(run: RunRecord, tree: Path) -> list[str]:
    """loopd's own exclude list for the run: what setup made."""
    return [anchored(rel) for rel in setup_paths(run, tree)]
