"""`loopd runs` and `loopd show RUN_ID`: the record of runs, queued, parked and past."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from daemon.cli.common import CommandError, console, engine_control, home_of
from daemon.cli.engine_views import engine_record, show_runs
from daemon.cli.jsonout import print_json
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
from daemon.cli.thenight import Night
from daemon.clock import utc_now
from daemon.landing.branches import HandMerges
from daemon.people.terminal import clean
from daemon.plain.aftermath import line_of, object_of
from daemon.plain.landing import LandsToday
from daemon.state.agentrecords import read_decisions, read_evidence
from daemon.state.pruned import PrunedRun, find_pruned, newest_pruned
from daemon.state.store import UnreadableFile


def runs(args: argparse.Namespace) -> int:
    """List runs: queued and parked ones first, then the rest, newest first."""
    home = home_of(args)
    loaded = home.load()  # read once: which engine, and how events rotate
    control = engine_control(home, loaded)
    if control is not None:  # the engine holds every machine's runs
        return show_runs(control, args)
    store = home.state(loaded.daemon.limits.events_rotate)
    if args.loop and not (home.loops_dir / f"{args.loop}.toml").exists():
        if not store.run_ids(args.loop) and not newest_pruned(store.root, args.loop, 1):
            raise CommandError(f"unknown loop {args.loop!r}: no loop file and no runs")
    queued = [p for p in store.load_queue().pending if args.loop in (None, p.loop)]
    queued = [p for p in queued if not (store.run_dir(p.id) / "run.toml").exists()]
    parked = _parked_runs(store, args.loop)
    shown = {r.id for r in parked}
    night = Night.parse(args.night, loaded) if getattr(args, "night", None) else None
    if night is not None:  # queued and parked runs have begun no night yet
        queued, parked, shown = [], [], set()
    records = []
    for run in store.iter_runs(args.loop) if night is None else night.runs(store, args.loop):
        if run.id not in shown:
            records.append(run)
        if len(records) >= args.limit:
            break
    _notice_hand_merges(store, records)
    lands = LandsToday(home.root)  # texts about a landing say the loop's `land` today
    # Then what retain_days folded away, newest first: older than every run still kept.
    room = args.limit - len(records)
    listed = {r.id for r in records}
    pruned = [p for p in newest_pruned(store.root, args.loop, max(room, 0)) if p.run not in listed]
    if night is not None:
        pruned = [p for p in pruned if p.started is not None and night.holds(p.started)]
    if args.json:
        print_json(
            [queued_summary(p) for p in queued]
            + [run_summary(r, lands) for r in parked]
            + [
                {**run_summary(r, lands), "aftermath": object_of(store.run_dir(r.id))}
                for r in records
            ]
            + [pruned_summary(p) for p in pruned]
        )
        return 0

    rows = [queued_row(p) for p in queued] + [run_row(r, lands) for r in parked]
    rows += [run_row(r, lands, line_of(store.run_dir(r.id)) if r.landed else "") for r in records]
    rows += [pruned_row(p) for p in pruned]
    sys.stdout.write(runs_table(f"runs in {home.root}", rows, Terminal.of()))
    return 0


def _show_pruned(p: PrunedRun, as_json: bool) -> int:
    """`loopd show` of a run retain_days folded away: what its line keeps."""
    if as_json:
        print_json({**p.model_dump(mode="json"), "phase": "pruned"})
        return 0
    sys.stdout.write(pruned_panel(p, Terminal.of()))
    return 0


def _notice_hand_merges(store: Any, records: list[Any]) -> None:
    """Runs whose branch a person merged by hand are recorded landed before they are shown."""
    hands = HandMerges(store, utc_now())  # each repository's branches read once
    for run in records:
        if run.outcome == "succeeded" and not run.landed:
            hands.notice(run)


def _parked_runs(store: Any, loop: str | None) -> list[Any]:
    """Runs parked in phase `waiting` (a quota, a budget): live runs whose record says so."""
    out = []
    for run_id in store.live_runs():
        try:
            run = store.load_run(run_id)
        except (FileNotFoundError, UnreadableFile):
            continue
        if run.phase == "waiting" and loop in (None, run.loop):
            out.append(run)
    return out


def show(args: argparse.Namespace) -> int:
    """Show one run: trigger, attempts with checks, score, verdict, feedback; --diff: changes."""
    home = home_of(args)
    loaded = home.load()  # read once: how events rotate, and which engine
    store = home.state(loaded.daemon.limits.events_rotate)

    control = engine_control(home, loaded)
    if control is not None:  # the engine holds every machine's runs
        run = engine_record(control, args.run_id)
    elif not (store.run_dir(args.run_id) / "run.toml").exists():
        pruned = find_pruned(store.root, args.run_id)
        if pruned is None:
            raise CommandError(f"unknown run {args.run_id!r}; `loopd runs` lists them")
        if args.diff:
            raise CommandError(f"run {args.run_id} was {pruned.line()}, its diff with them")
        return _show_pruned(pruned, args.json)
    else:
        try:
            run = store.load_run(args.run_id)
        except UnreadableFile as exc:
            raise CommandError(f"{exc}; the file is left as it is", code=1) from None
        _notice_hand_merges(store, [run])
    if args.diff:
        return _show_diff(store, run, args.attempt)
    if args.json:
        after = object_of(store.run_dir(run.id))
        print_json({"run": run.id, **run.model_dump(mode="json"), "aftermath": after})
        return 0
    run_dir = store.run_dir(run.id)
    lands = LandsToday(home.root)
    line = line_of(run_dir, commits=True)
    evidence, decisions = read_evidence(run_dir), read_decisions(run_dir)
    text = run_text(run, evidence, decisions, Terminal.of(), lands, line)
    sys.stdout.write(text)
    return 0


def _show_diff(store: Any, run: Any, only: int | None) -> int:
    """Each attempt's diff.patch (what loopd committed of it), control sequences removed."""
    attempts = [a.n for a in run.attempts if only is None or a.n == only]
    if only is not None and not attempts:
        raise CommandError(f"run {run.id} has no attempt {only}")
    styled = sys.stdout.isatty()
    out = console() if styled else None
    for n in attempts:
        path = store.run_dir(run.id) / f"attempt-{n}" / "diff.patch"
        header = f"# attempt {n}: {path}"
        if not path.exists() or path.stat().st_size == 0:
            print(f"{header}\n# (no changes)", flush=True)
            continue
        print(header, flush=True)
        with path.open("r", encoding="utf-8", errors="replace") as fh:
            for raw in fh:
                line = clean(raw.rstrip("\n"))
                if out is None:
                    sys.stdout.write(line + "\n")
                    continue
                from rich.text import Text

                style = ""
                if line.startswith(("+++", "---", "diff --git", "index ")):
                    style = "bold"
                elif line.startswith("+"):
                    style = "green"
                elif line.startswith("-"):
                    style = "red"
                elif line.startswith("@@"):
                    style = "cyan"
                out.print(Text(line, style=style), soft_wrap=True, highlight=False)
    sys.stdout.flush()
    return 0
