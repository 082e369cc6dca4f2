"""A run's landing state: landed (how), or why not and what to run. Every view reads it here.

`loopd show`, `loopd runs`, `loopd branches`, `loopd report` and the escalation read this one
answer, built from the run's record (`landed`, `landed_how`, `landing`), so they agree.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from daemon.state.records import RunRecord, is_experiment

State = Literal["landed", "blocked", "review", "none"]


class LandingState(BaseModel):
    """Where a run's work went: `state`, `how` it landed, `why` not, what to `run` next."""

    state: State
    how: str = ""  # merge, push, by hand
    why: str = ""
    run: str = ""  # the command a person runs next

    def line(self) -> str:
        """One line for a terminal or a Markdown file."""
        if self.state == "landed":
            return f"landed {self.why} ({self.how})".replace("  ", " ")
        text = {"landed": "landed", "blocked": "not landed", "review": "not landed"}.get(
            self.state, "nothing to land"
        )
        if self.how:
            text += f" ({self.how})"
        if self.why:
            text += f": {self.why}"
        return text + (f"; run `{self.run}`" if self.run else "")


def landing_state(run: RunRecord) -> LandingState:
    """The landing state the run's record holds."""
    if run.landed:
        where = f" on {run.target}" if run.target else ""
        if (run.landed_how or run.land) == "push":
            where = f" as branch {run.branch or run.branch_deleted} pushed for {run.target}"
        at = f" at {run.landed_as[:12]}" if run.landed_as else ""
        return LandingState(
            state="landed", how=run.landed_how or run.land, why=f"{where}{at}".strip()
        )
    if run.outcome != "succeeded" or is_experiment(run):
        why = "the run did not succeed" if run.outcome else "the run has not ended"
        return LandingState(state="none", why=why if run.outcome != "succeeded" else "")
    if run.isolation == "in-place" or not run.branch:
        return LandingState(state="none", why="the run left no branch")
    take = f"loopd land {run.id}"
    if run.landing:
        return LandingState(state="blocked", how=run.land, why=run.landing, run=take)
    if run.land in ("", "branch"):
        why = 'the loop has land = "branch": review the branch'
        return LandingState(state="review", how="branch", why=why, run=take)
    return LandingState(state="review", how=run.land, why="not tried yet", run=take)
