"""A run's landing state told from its record alone, for a RunRecord or a plain one (a
plain/runfile.View): people/landstate.py makes its LandingState of these fields, and the read
commands' plain path prints them without the models."""

from __future__ import annotations

from typing import Any


def landing_fields(run: Any) -> dict[str, str]:
    """LandingState's fields: `state` (landed, blocked, review, none), `how` it landed or
    would, `why` not, the command to `run` next."""
    if run.landed:
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
    if run.landing:
        return _fields("blocked", how=run.land, why=run.landing, run=take)
    if run.land in ("", "branch"):
        why = 'the loop has land = "branch": review the branch'
        return _fields("review", how="branch", why=why, run=take)
    return _fields("review", how=run.land, why="not tried yet", run=take)


def _fields(state: str, how: str = "", why: str = "", run: str = "") -> dict[str, str]:
    return {"state": state, "how": how, "why": why, "run": run}


def landing_line(fields: dict[str, str]) -> str:
    """The landing state in one line for a terminal or a Markdown file."""
    state, how, why = fields["state"], fields["how"], fields["why"]
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
