"""`loopd aftermath [LOOP|RUN]`: every landed run's aftermath brought up to date, printed."""

from __future__ import annotations

import argparse
import sys

from daemon.aftermath.landhold import hold_reverted
from daemon.aftermath.lesson import teach
from daemon.aftermath.sweep import sweep
from daemon.calibration.field import field_figures
from daemon.cli.common import CommandError, home_of
from daemon.cli.jsonout import print_json
from daemon.clock import utc_now
from daemon.people.aftermath_view import aftermath_json, aftermath_line, commit_line
from daemon.people.terminal import clean
from daemon.runparts.services import RunServices
from daemon.state.records import RunRecord
from daemon.state.store import StateStore


def aftermath(args: argparse.Namespace) -> int:
    """Print what became of each landed run on its target: kept, edited, reverted or gone."""
    # Every record is brought up to date first (docs/aftermath.md).
    home = home_of(args)
    loaded = home.load()
    store = home.state(loaded.daemon.limits.events_rotate)
    runs = _chosen(store, args.which)
    keys = {name: (loop.config.remote, loop.config.agent) for name, loop in loaded.loops.items()}
    services = RunServices(home=home, config=loaded.daemon, store=store)
    found = sweep(
        store,
        runs,
        utc_now(),
        loop_keys=lambda loop: keys.get(loop, ("origin", "")),
        teach=lambda git, run, record: teach(services, git, run, record),
    )
    limits = {n: (lp.config.land, lp.config.revert_limit) for n, lp in loaded.loops.items()}
    for loop in hold_reverted(store, limits, found.records, utc_now()):
        sys.stdout.write(
            f'{loop}: reverted too often, back to land = "branch" (`loopd escalations list`)\n'
        )
    thresholds = {n: lp.config.critic_threshold for n, lp in loaded.loops.items()}
    field_figures(store, loaded.daemon, thresholds, utc_now())
    if args.json:
        print_json(
            {
                "aftermath": [aftermath_json(r) for r in found.records],
                "failed": found.failed,
            }
        )
        return 1 if found.failed else 0
    if not found.records and not found.failed:
        print("no landed runs to follow" + (f" for {args.which}" if args.which else ""))
    for record in found.records:
        sys.stdout.write(clean(f"{record.run} ({record.loop}): {aftermath_line(record)}") + "\n")
        for commit in sorted(record.commits, key=lambda c: not c.revert):
            sys.stdout.write(clean(f"  {commit_line(commit)}") + "\n")
    for run_id, result in found.taught.items():
        what = getattr(result, "decision", "") or "asked"
        sys.stdout.write(f"{run_id}: a post-mortem of its failure after landing: {what}\n")
    for run_id, error in found.failed.items():
        sys.stdout.write(clean(f"{run_id}: could not be followed: {error}") + "\n")
    return 1 if found.failed else 0


def _chosen(store: StateStore, which: str | None) -> list[RunRecord]:
    """The runs `which` names: one run, one loop's, or all; oldest first."""
    if which and (store.run_dir(which) / "run.toml").exists():
        return [store.load_run(which)]
    if which and not store.run_ids(which):
        raise CommandError(f"no run and no loop's runs named {which!r}; `loopd runs` lists them")
    return list(store.iter_runs(which, newest_first=False))
