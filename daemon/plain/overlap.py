"""Which loops landing on one target have changed the same files lately: the warning before
the night (`loopd check`, `loopd status`) and a new run's note of the runs it may collide
with (runs/overlapnote.py writes it into the run's `[trigger]`).

A loop's recent files are those its last RECENT_RUNS runs changed, among the runs started
within RECENT_DAYS: the union of each attempt's `diffstat.json` (git/diffs.py; every run
that committed an attempt, whatever its outcome). The run ids say when a run started
(state/runids.py), so nothing but those small JSON files is read; imports no model, so the
read commands' plain path calls it as the full path does.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from itertools import combinations
from pathlib import Path
from typing import Any

from daemon.state.runids import listed_run_ids

RECENT_RUNS = 5  # a loop's newest runs looked at
RECENT_DAYS = 7  # ... among those started this many days before now
FILES_SHOWN = 5  # files named in a line; the JSON lists them all


def run_started(run_id: str) -> datetime | None:
    """When the run started, from its id (`YYYYMMDDTHHMMSSZ-...`)."""
    try:
        return datetime.strptime(run_id[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def run_files(state_dir: Path, run_id: str) -> set[str]:
    """The files the run's attempts changed so far (each attempt's diffstat.json)."""
    folder = state_dir / "runs" / run_id
    try:
        names = [n for n in os.listdir(folder) if n.startswith("attempt-")]
    except OSError:
        return set()
    files: set[str] = set()
    for name in names:
        try:
            stat = json.loads((folder / name / "diffstat.json").read_bytes())
        except (OSError, ValueError):
            continue  # no diff yet, or cut by a crash: what the others say still counts
        for change in stat.get("files", []) if isinstance(stat, dict) else []:
            if isinstance(change, dict) and isinstance(change.get("path"), str):
                files.add(change["path"])
    return files


def recent_runs(state_dir: Path, loop: str, now: datetime) -> list[str]:
    """The loop's newest runs (RECENT_RUNS) started within RECENT_DAYS of `now`."""
    since = now - timedelta(days=RECENT_DAYS)
    ids = listed_run_ids(state_dir / "runs", loop)[-RECENT_RUNS:]
    return [i for i in ids if (run_started(i) or since) > since]


def loop_files(state_dir: Path, loop: str, now: datetime, skip: str = "") -> set[str]:
    """The files `loop`'s recent runs changed (`skip`: a run left out, the one starting)."""
    files: set[str] = set()
    for run_id in recent_runs(state_dir, loop, now):
        if run_id != skip:
            files |= run_files(state_dir, run_id)
    return files


def overlaps(state_dir: Path, loops: dict[str, dict[str, Any]], now: datetime) -> list[dict]:
    """Each pair of loops with the same `repo` and `target` whose recent runs changed the same
    files: {loops: [a, b], repo, target, files} (loops as `config_facts` gives them)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for name, loop in sorted(loops.items()):
        if loop.get("enabled", True) and loop.get("repo") and loop.get("target"):
            groups.setdefault((loop["repo"], loop["target"]), []).append(name)
    found = []
    for (repo, target), names in sorted(groups.items()):
        if len(names) < 2:
            continue
        files = {name: loop_files(state_dir, name, now) for name in names}
        for a, b in combinations(names, 2):
            both = sorted(files[a] & files[b])
            if both:
                found.append({"loops": [a, b], "repo": repo, "target": target, "files": both})
    return found


def named(files: list[str]) -> str:
    """`files` in a line: the first few, then how many more."""
    shown = ", ".join(files[:FILES_SHOWN])
    more = len(files) - FILES_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def overlap_line(overlap: dict[str, Any]) -> str:
    """One overlap as `check` and `status` say it."""
    a, b = overlap["loops"]
    return (
        f"loops {a} and {b} both land on {overlap['target']} of {overlap['repo']} and their "
        f"recent runs changed the same files: {named(overlap['files'])}; their runs land one "
        "at a time, and the second may conflict (docs/landing.md#overlapping-loops)"
    )
