"""`loopd runs` and `loopd show RUN_ID` by the plain path (daemon/plain/): the home's run
records read as plain TOML, printed by the views the full path prints with (cli/runlines.py),
so the output is the same, byte for byte, without importing the models.

Each answers None (the full path answers) where it cannot be sure: another engine, a record
or queue the models may read otherwise or report (plain/records.Unsure), an unknown loop or
run (the full path says so), `show --diff`, a run whose branch a person merged by hand (the
full path records it landed before it shows it), the agent's evidence lines or an attempt's
violations in `show` (their text is the models').
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from daemon.cli.jsonout import json_text
from daemon.cli.runlines import (
    pruned_panel,
    pruned_row,
    pruned_summary,
    queued_row,
    queued_summary,
    run_row,
    run_summary,
    run_text,
    runs_table,
)
from daemon.cli.textout import Terminal
from daemon.homepath import HomeNotFound, home_path
from daemon.plain.aftermath import line_of, object_of
from daemon.plain.home import reads_own_state
from daemon.plain.landing import LandsToday, may_have_landed
from daemon.plain.records import Unsure
from daemon.plain.runfile import (
    View,
    find_pruned,
    jsonable,
    live_runs,
    newest_pruned,
    pending_runs,
    read_run,
    run_ids,
)
from daemon.regularfile import STATE_MAX, read_regular


def runs(args: argparse.Namespace) -> int | None:
    """`loopd runs [LOOP] [--limit N] [--json]`, or None."""
    if getattr(args, "night", None):
        return None  # a night is counted in the configuration's zone: the full path reads it
    root = _own_home(args)
    if root is None:
        return None
    try:
        text = _runs_text(root, args)
    except Unsure:
        return None
    return _printed(text)


def show(args: argparse.Namespace) -> int | None:
    """`loopd show RUN_ID [--json]`, or None (`--diff` takes the full path)."""
    if args.diff or args.attempt is not None:
        return None
    root = _own_home(args)
    if root is None:
        return None
    try:
        text = _show_text(root / "state", args.run_id, args.json)
    except Unsure:
        return None
    return _printed(text)


def _own_home(args: argparse.Namespace) -> Path | None:
    """The home, when the commands read its own `state/` (else the engine answers)."""
    try:
        root = home_path(getattr(args, "home", None))
    except HomeNotFound:
        return None  # the full path says so
    return root if reads_own_state(root) else None


def _printed(text: str | None) -> int | None:
    if text is None:
        return None
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0


def _runs_text(root: Path, args: argparse.Namespace) -> str | None:
    """What cli/show.runs prints, or None."""
    state, loop, limit = root / "state", args.loop, args.limit
    runs_dir = state / "runs"
    if loop and not (root / "loops" / f"{loop}.toml").exists():
        if not run_ids(runs_dir, loop) and not newest_pruned(state, loop, 1):
            return None  # an unknown loop: the full path's error
    queued = [View(p) for p in pending_runs(state) if loop in (None, p["loop"])]
    queued = [p for p in queued if not (runs_dir / p.id / "run.toml").exists()]
    parked = []
    for run_id in live_runs(state):
        record = read_run(runs_dir / run_id)
        if record is not None and record["phase"] == "waiting" and loop in (None, record["loop"]):
            parked.append(View(record))
    shown = {r.id for r in parked}
    records = []
    for run_id in reversed(run_ids(runs_dir, loop)):
        record = read_run(runs_dir / run_id)
        if record is None:
            continue  # a folder whose record is not written yet
        if record["id"] not in shown:
            records.append(View(record))
        if len(records) >= limit:
            break
    if _hand_merged(state, records):
        return None
    # Then what retain_days folded away, newest first: older than every run still kept.
    listed = {r.id for r in records}
    pruned = [
        View(p) for p in newest_pruned(state, loop, max(limit - len(records), 0))
        if p["run"] not in listed
    ]  # fmt: skip
    lands = LandsToday(root)  # texts about a landing say the loop's `land` today
    if args.json:
        return json_text(
            [queued_summary(p) for p in queued]
            + [run_summary(r, lands) for r in parked]
            + [{**run_summary(r, lands), "aftermath": object_of(runs_dir / r.id)} for r in records]
            + [pruned_summary(p) for p in pruned]
        )
    rows = [queued_row(p) for p in queued] + [run_row(r, lands) for r in parked]
    rows += [run_row(r, lands, line_of(runs_dir / r.id) if r.landed else "") for r in records]
    rows += [pruned_row(p) for p in pruned]
    return runs_table(f"runs in {root}", rows, Terminal.of())


def _show_text(state: Path, run_id: str, as_json: bool) -> str | None:
    """What cli/show.show prints, or None."""
    run_dir = state / "runs" / run_id
    if not (run_dir / "run.toml").exists():
        pruned = find_pruned(state, run_id)
        if pruned is None:
            return None  # an unknown run: the full path's error
        if as_json:
            return json_text({**jsonable(pruned), "phase": "pruned"})
        return pruned_panel(View(pruned), Terminal.of())
    record = read_run(run_dir)
    if record is None:
        return None
    run = View(record)
    if _hand_merged(state, [run]):
        return None
    if as_json:
        return json_text({"run": run.id, **jsonable(record), "aftermath": object_of(run_dir)})
    records = state / "runs" / run.id  # the record's own folder, as the full path reads it
    if any(a.violations for a in run.attempts) or os.path.lexists(records / "evidence.jsonl"):
        return None  # their lines are the models' text
    try:  # as state/agentrecords.read_decisions
        decisions = read_regular(records / "decisions.md", cap=STATE_MAX).decode("utf-8", "replace")
    except OSError:
        decisions = ""
    lands = LandsToday(state.parent)
    return run_text(run, [], decisions, Terminal.of(), lands, line_of(run_dir, commits=True))


def _hand_merged(state: Path, runs: list[View]) -> bool:
    """Whether a person merged the branch of one of `runs` into its target by hand: the full
    path records it landed, then shows it. Git is asked only of runs that may have landed."""
    live = set(live_runs(state))
    maybe = [r for r in runs if r.outcome == "succeeded" and may_have_landed(r, live)]
    if not maybe:
        return False
    # Git's module (subprocess, threads) costs more than a listing without one.
    from daemon.cli.plainmerge import hand_merged

    return hand_merged(maybe)
