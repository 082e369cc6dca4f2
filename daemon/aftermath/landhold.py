"""A loop whose landings people keep reverting goes back to `land = "branch"` by itself.

After a sweep, each loop with `land = "merge"` or `"push"` whose runs a person reverted
`revert_limit` times within the 7 days before `now` (reverts before its last hold was lifted
not counted again) is held at `branch` (state/landholds.py), with one escalation that names
the reverted runs and the person's messages and says how to restore it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from daemon.people.escalation import write_notice
from daemon.state.aftermath import Aftermath
from daemon.state.eventtypes import Event
from daemon.state.landholds import (
    LAND_HELD_CAUSE,
    LandHold,
    load_land_holds,
    save_land_holds,
)
from daemon.state.store import StateStore

WITHIN = timedelta(days=7)


def hold_reverted(
    store: StateStore,
    loops: Mapping[str, tuple[str, int]],
    records: Iterable[Aftermath],
    now: datetime,
) -> list[str]:
    """Hold at `branch` each loop of `loops` (name: its `land`, its `revert_limit`) whose
    records show `revert_limit` reverted runs in 7 days; the loops held now."""
    holds = load_land_holds(store)
    reverted: dict[str, list[Aftermath]] = {}
    for record in records:
        land, _ = loops.get(record.loop, ("branch", 0))
        if land == "branch" or record.loop in holds.loops:
            continue
        since = max(now - WITHIN, holds.lifted.get(record.loop, now - WITHIN))
        if any(c.revert and since < c.date <= now for c in record.commits):
            reverted.setdefault(record.loop, []).append(record)
    held = []
    for loop, found in sorted(reverted.items()):
        land, limit = loops[loop]
        if len(found) < limit:
            continue
        found.sort(key=lambda r: r.landed_at)
        escalation = _escalation_id(store, found[-1].run)
        runs = [r.run for r in found]
        holds.loops[loop] = LandHold(since=now, was=land, runs=runs, escalation=escalation)
        save_land_holds(store, holds)  # the hold first: an escalation never stands for none
        write_notice(
            store, escalation, loop, f'{loop}: back to land = "branch"', LAND_HELD_CAUSE,
            _body(loop, land, limit, found, escalation), now,
        )  # fmt: skip
        store.events.append(
            Event.LAND_HELD, now, loop=loop, was=land, runs=runs, escalation=escalation
        )
        held.append(loop)
    return held


def _escalation_id(store: StateStore, run: str) -> str:
    name = f"{run}-land"
    return name if not store.escalation_path(name).exists() else f"{name}-2"


def _body(loop: str, land: str, limit: int, found: list[Aftermath], escalation: str) -> str:
    lines = [
        f"# {loop} lands on its branch: people reverted {len(found)} of its landings in 7 days",
        "",
        f'The loop\'s file says `land = "{land}"`; {len(found)} runs it landed were reverted '
        f"within 7 days (`revert_limit = {limit}`), so its runs now stay on their branch "
        f'(`land = "branch"`) for you to review. Your loop file is unchanged.',
        "",
        "## The reverted runs",
        "",
    ]
    for record in found:
        lines.append(f"- run {record.run}, landed on {record.target} at {record.landed_at}:")
        for c in record.commits:
            if c.revert:
                lines.append(f"  - {c.commit[:12]} by {c.author}, {c.date}: {c.message}")
    lines += [
        "",
        "## To restore it",
        "",
        f'`loopd escalations resolve {escalation} --note "..."` lifts the hold: the next runs '
        f'land with `land = "{land}"` again (reverts before that are not counted again). '
        "`loopd status` and `loopd check` show the hold while it stands.",
        "",
    ]
    return "\n".join(lines)
