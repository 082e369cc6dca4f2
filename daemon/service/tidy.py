"""The housekeeper's hourly tidying: run branches their target contains, `git gc --auto`
in each repository loopd fetches into (at most once a day each), and rotated event files
past `retain_days`. Each part fails alone, as an event; none stops the daemon."""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

from daemon.config.land import land_target
from daemon.git.maintenance import maintain
from daemon.git.safe import GitError
from daemon.git.userrepo import UserRepo
from daemon.housekeeping import cited_by_deferred_lessons, cited_by_open_escalations, cited_by_rules
from daemon.landing.tidy import delete_landed_branches
from daemon.service.context import Context
from daemon.service.statecap import Growth, compress_finished, enforce
from daemon.state.events import rotated_numbers
from daemon.state.eventtypes import Event
from daemon.state.store import StateStore
from daemon.state.tidymarks import load_maintenance, save_maintenance

MAINTAIN_EVERY = timedelta(days=1)


def tidy(ctx: Context, now: datetime, keep: set[str], growth: Growth | None = None) -> None:
    """Branches, repositories, rotated event files, `state_max`."""
    try:
        delete_branches(ctx, now)
    except Exception as exc:  # noqa: BLE001 - housekeeping never stops the daemon
        ctx.event(Event.BRANCH_TIDY_FAILED, error=str(exc)[:500])
    maintain_repositories(ctx, now)
    retain_days = ctx.config.daemon.limits.retain_days
    try:
        removed = prune_rotated_events(ctx.store, retain_days, now)
    except OSError as exc:
        ctx.event(Event.EVENTS_PRUNE_FAILED, error=str(exc)[:500])
    else:
        if removed:
            ctx.event(Event.EVENTS_PRUNED, files=removed, retain_days=retain_days)
    try:
        cap_state(ctx, now, keep, growth)
    except OSError as exc:
        ctx.event(Event.STATE_CAP_FAILED, error=str(exc)[:500])


def cap_state(
    ctx: Context, now: datetime, keep: set[str], growth: Growth | None = None
) -> list[str]:
    """Keep `state/` under `state_max`; the runs something was evicted from. `growth` is
    told the measure (the housekeeper's estimate starts from it)."""

    store = ctx.store
    files, saved = compress_finished(store)
    if files:
        ctx.event(Event.TRANSCRIPTS_COMPRESSED, files=files, saved=saved)
    protected = set(keep) | cited_by_open_escalations(store) | cited_by_deferred_lessons(store)
    protected |= cited_by_rules(ctx.home.rules_dir)
    limit = ctx.config.daemon.limits.state_limit(store.root)
    events: list[str] = []
    usage, evicted = enforce(store, limit, now, protected, events)
    if growth is not None:
        growth.measured(store, usage.total)
    if evicted or events:
        ctx.event(
            Event.STATE_EVICTED,
            runs=evicted[:50],
            count=len(evicted),
            total=usage.total,
            limit=limit,
            events=events,
        )
    return evicted


def delete_branches(ctx: Context, now: datetime) -> list[str]:
    """Delete the run branches each loop's landing target contains."""

    loops = {}
    for name, loop in ctx.loops.items():
        if loop.config.isolation == "in-place":
            continue  # its branch is the person's own
        repo = loop.config.repo_path
        loops[name] = (repo, land_target(repo, loop.config))
    return delete_landed_branches(ctx.store, loops, now)


def maintain_repositories(ctx: Context, now: datetime) -> None:
    """`git gc --auto` in each loop's repository not maintained in the last day."""

    store = ctx.store
    marks = load_maintenance(store)
    seen: set[Path] = set()
    for name, loop in sorted(ctx.loops.items()):
        repo = loop.config.repo_path
        try:
            user = UserRepo.locate(repo)
        except (GitError, OSError):
            continue  # `loopd check` and the loop's runs say what is wrong with it
        if user.common in seen:
            continue
        seen.add(user.common)
        last = marks.repos.get(str(user.common))
        if last is not None and now - last < MAINTAIN_EVERY:
            continue
        # Marked before it runs: a gc that crashes loopd is not tried again at every start.
        marks.repos[str(user.common)] = now
        save_maintenance(store, marks)
        try:
            done = maintain(user)
        except GitError as exc:
            ctx.event(
                Event.REPO_MAINTENANCE_FAILED, loop=name, repo=str(repo), error=str(exc)[:500]
            )
            continue
        ctx.event(
            Event.REPO_MAINTAINED,
            loop=name,
            repo=str(repo),
            packs_before=done.packs_before,
            packs_after=done.packs_after,
            seconds=round(done.seconds, 3),
            skipped=done.skipped,
        )


def prune_rotated_events(store: StateStore, retain_days: int, now: datetime) -> list[str]:
    """Delete rotated event files whose last event is older than `retain_days` (0 keeps
    them all); the current log is never touched. The names deleted."""
    if retain_days <= 0:
        return []
    cutoff = (now - timedelta(days=retain_days)).timestamp()
    current = store.events.path
    removed = []
    for n in sorted(rotated_numbers(current)):
        path = current.with_name(f"{current.stem}-{n}{current.suffix}")
        try:
            if path.is_symlink() or os.stat(path).st_mtime >= cutoff:
                continue  # written to since the cutoff: it holds events still retained
            path.unlink()
        except FileNotFoundError:
            continue
        removed.append(path.name)
    return removed
