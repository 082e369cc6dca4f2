"""`state/land-holds.toml`: loops sent back to `land = "branch"` by their reverted landings.

A loop with `land = "merge"` or `"push"` whose landings a person reverted `revert_limit`
times in 7 days lands on its branch only until the hold is lifted (by resolving the
escalation that stands for it). The user's loop file is never rewritten: a run's effective
`land` reads this file (`effective_land`).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from daemon.state.atomic import write_atomic
from daemon.state.records import Record
from daemon.state.store import StateStore, UnreadableFile, dump_toml, read_model

LAND_HELD_CAUSE = "landings-reverted"  # the cause of the escalation that stands for a hold


class LandHold(Record):
    """A loop held at `land = "branch"`: since when, the mode it had, the runs reverted."""

    since: datetime
    was: str = "merge"
    runs: list[str] = []
    escalation: str = ""  # the escalation's id: resolving it lifts the hold


class LandHoldFile(Record):
    loops: dict[str, LandHold] = {}
    lifted: dict[str, datetime] = {}  # loop: when its last hold was lifted (older reverts spent)


def _path(store: StateStore) -> Path:
    return store.root / "land-holds.toml"


def load_land_holds(store: StateStore) -> LandHoldFile:
    """Every loop's hold; empty when none (or unreadable: reported)."""
    try:
        return read_model(_path(store), LandHoldFile)
    except FileNotFoundError:
        return LandHoldFile()
    except UnreadableFile as exc:
        store.report_unreadable(exc)
        return LandHoldFile()


def save_land_holds(store: StateStore, holds: LandHoldFile) -> None:
    write_atomic(_path(store), dump_toml(holds))


def effective_land(store: StateStore, loop: str, land: str) -> str:
    """The loop's `land` as runs use it: `branch` while a hold stands."""
    if land == "branch":
        return land
    return "branch" if loop in load_land_holds(store).loops else land


def lift_land_hold(store: StateStore, escalation: str, now: datetime) -> str:
    """Lift the hold the escalation `escalation` stands for; the loop lifted, or ""."""
    holds = load_land_holds(store)
    for loop, hold in list(holds.loops.items()):
        if hold.escalation == escalation:
            del holds.loops[loop]
            holds.lifted[loop] = now
            save_land_holds(store, holds)
            return loop
    return ""
