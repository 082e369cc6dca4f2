"""`loopd branches`: the run branches in the loops' repositories, and pruning them."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from daemon.cli.common import CommandError, console, home_of, print_json
from daemon.clock import utc_now
from daemon.landing.branches import list_branches, prune_branches


def branches(args: argparse.Namespace) -> int:
    """List run branches (outcome, +/- lines, landed); --prune deletes landed and expired ones."""
    home = home_of(args)
    loaded = home.load()
    repos = {name: loop.config.repo_path for name, loop in loaded.loops.items()}
    if args.loop and args.loop not in repos:
        raise CommandError(f"unknown loop {args.loop!r}; known loops: {', '.join(repos) or 'none'}")
    store = home.state(loaded.daemon.limits.events_rotate)
    rows = list_branches(store, repos, utc_now(), args.loop or "")
    deleted = []
    if args.prune:
        retain = loaded.daemon.limits.retain_days
        deleted = prune_branches(store, rows, retain, utc_now())
        gone = {row.branch for row in deleted}
        rows = [row for row in rows if row.branch not in gone]
    if args.json:
        print_json(
            {
                "branches": [asdict(row) for row in rows],
                "deleted": [row.branch for row in deleted],
            }
        )
        return 0
    out = console()
    from rich.markup import escape

    for row in deleted:
        why = "landed" if row.landed else "expired"
        out.print(f"deleted {escape(row.branch)} ({why})", soft_wrap=True)
    if not rows:
        out.print("No run branches." if not deleted else "No other run branches.")
        return 0
    for row in rows:
        state = "running" if row.live else (row.landing or "no record")
        out.print(
            f"{escape(row.branch)}  {escape(row.outcome or '(no record)')}  "
            f"+{row.added} -{row.removed}  {escape(state)}  {escape(row.repo)}",
            soft_wrap=True,
        )
    return 0
