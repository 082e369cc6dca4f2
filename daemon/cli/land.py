"""`loopd land RUN`: land a succeeded run now, with the same checks as automatic landing."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from daemon.cli.common import CommandError, home_of
from daemon.clock import utc_now
from daemon.landing.branches import notice_landed
from daemon.landing.queue import land_queued
from daemon.people.escalation import AlreadyResolved, resolve
from daemon.people.landstate import landing_state
from daemon.people.terminal import clean
from daemon.runparts.journal import RunJournal
from daemon.runparts.services import RunServices
from daemon.state.eventtypes import Event
from daemon.state.records import Cause


def land(args: argparse.Namespace) -> int:
    """Land a succeeded run: its setup and checks run again on what lands, then merge or push."""
    home = home_of(args)
    loaded = home.load()
    store = home.state(loaded.daemon.limits.events_rotate)
    if not (store.run_dir(args.run_id) / "run.toml").exists():
        raise CommandError(f"unknown run {args.run_id!r}; `loopd runs` lists them")
    run = store.load_run(args.run_id)
    notice_landed(store, run, utc_now())
    if run.landed:
        print(clean(landing_state(run).line()))
        return 0
    if run.outcome != "succeeded":
        raise CommandError(
            f"run {run.id} ended {run.outcome or run.phase}, and only a succeeded run lands; "
            f"read `loopd show {run.id}`, then merge its branch yourself or "
            f"`loopd escalations resolve {run.id} --retry`",
            code=1,
        )
    if not run.branch or run.isolation == "in-place":
        raise CommandError(f"run {run.id} left no branch of its own to land", code=1)
    loop = loaded.loops.get(run.loop)
    if loop is None:
        raise CommandError(
            f"loops/{run.loop}.toml does not load, and landing needs its setup, checks and "
            f"landing keys; fix it (`loopd check`), then `loopd land {run.id}` again",
            code=1,
        )
    # The loop's `land` today, not the night's; a loop that leaves landing to a person
    # (`branch`) asked to land merges.
    run.land = "push" if loop.config.land == "push" else "merge"
    if not run.target:
        raise CommandError(f"run {run.id} has no target branch recorded; merge it yourself")
    run.landing = ""
    by = getattr(args, "by", "")  # the console says who; the command line does not
    store.events.append(
        Event.LAND_REQUESTED,
        utc_now(),
        loop=run.loop,
        run=run.id,
        target=run.target,
        **({"by": by} if by else {}),
    )
    services = RunServices(home=home, config=loaded.daemon, store=store)
    journal = RunJournal(services, run)
    land_queued(journal, loop.config)
    line = clean(landing_state(run).line())
    if run.landed:
        _landed_now(store, run)
        print(line)
        return 0
    print(line, file=sys.stderr)
    return 1


def _landed_now(store: Any, run: Any) -> None:
    """A run that landed at last: its cause says it passed; the escalation its blocked landing
    opened is resolved."""
    if run.cause in (
        Cause.LANDING_BLOCKED,
        Cause.LANDING_CHECKS_FAILED,
        Cause.LANDING_CONFLICT,
        Cause.LANDING_MOVING,
    ):
        run.cause = Cause.PASSED
        store.save_run(run)
    if store.escalation_path(run.id).exists():
        try:
            resolve(store, run.id, utc_now(), note=f"landed by `loopd land {run.id}`")
        except AlreadyResolved:
            pass
