"""A run's landing state told from its record alone, for a RunRecord or a plain one (a
plain/runfile.View): people/landstate.py makes its LandingState of these fields, and the read
commands' plain path prints them without the models."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

ALREADY = "already"  # landing/squash.py's: the target held the run's change before it landed


def landing_fields(run: Any, land_now: str = "") -> dict[str, str]:
    """LandingState's fields: `state` (landed, blocked, review, none), `how` it landed or
    would, `why` not, the command to `run` next. `land_now`: the loop's `land` today (its
    file read now), which a run not landed is told by ("": the one its record holds)."""
    if run.landed:
        if run.landed_how == ALREADY:
            at = f" at {run.landed_as[:12]}" if run.landed_as else ""
            held = f"{run.target or 'the target'} already held its change{at}"
            return _fields("landed", how=ALREADY, why=held)
        where = f" on {run.target}" if run.target else ""
        if (run.landed_how or run.land) == "push":
            where = f" as branch {run.branch or run.branch_deleted} pushed for {run.target}"
        at = f" at {run.landed_as[:12]}" if run.landed_as else ""
        return _fields("landed", how=run.landed_how or run.land, why=f"{where}{at}".strip())
    # An experiment (records.is_experiment: its trigger's kind) never lands.
    if run.outcome != "succeeded" or run.trigger.kind == "experiment":
        why = "the run did not succeed" if run.outcome else "the run has not ended"
        return _fields("none", why=why if run.outcome != "succeeded" else "")
    if run.isolation == "in-place" or not run.branch:
        return _fields("none", why="the run left no branch")
    take = f"loopd land {run.id}"
    land = land_now or run.land
    if land in ("", "branch"):
        why = 'the loop has land = "branch": review the branch'
        if run.landing:
            why = f"{why} (it did not land: {run.landing})"
        return _fields("review", how="branch", why=why, run=take)
    if run.landing:
        return _fields("blocked", how=land, why=run.landing, run=take)
    return _fields("review", how=land, why="not tried yet", run=take)


def _fields(state: str, how: str = "", why: str = "", run: str = "") -> dict[str, str]:
    return {"state": state, "how": how, "why": why, "run": run}


def landing_line(fields: dict[str, str]) -> str:
    """The landing state in one line for a terminal or a Markdown file."""
    state, how, why = fields["state"], fields["how"], fields["why"]
    if state == "landed" and how == ALREADY:
        return f"already landed: {why}"
    if state == "landed":
        return f"landed {why} ({how})".replace("  ", " ")
    text = {"blocked": "not landed", "review": "not landed"}.get(state, "nothing to land")
    if how:
        text += f" ({how})"
    if why:
        text += f": {why}"
    return text + (f"; run `{fields['run']}`" if fields["run"] else "")


def may_have_landed(run: Any, live: set[str]) -> bool:
    """Whether the run could be one whose branch a person merged: ended, not landed, with a
    branch of its own and a target."""
    if run.landed or run.outcome is None or not run.target or not run.branch:
        return False
    return run.isolation != "in-place" and run.id not in live


class LandsToday:
    """Each loop's `land` as `loops/LOOP.toml` of the home says it now, each file read once
    ("branch" when unset; "" when the file is gone or does not parse: the record's is told)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._lands: dict[str, str] = {}

    def __call__(self, loop: str) -> str:
        if loop not in self._lands:
            self._lands[loop] = self._read(loop)
        return self._lands[loop]

    def _read(self, loop: str) -> str:
        try:
            text = (self.home / "loops" / f"{loop}.toml").read_text(encoding="utf-8")
            land = tomllib.loads(text).get("land", "branch")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            return ""
        return land if land in ("branch", "merge", "push") else ""
