"""A run's landing state: landed (how), or why not and what to run. Every view reads it here.

`loopd show`, `loopd runs`, `loopd branches`, `loopd report` and the escalation read this one
answer, built from the run's record (`landed`, `landed_how`, `landing`), so they agree.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from daemon.plain.landing import landing_fields, landing_line
from daemon.state.records import RunRecord

State = Literal["landed", "blocked", "review", "none"]


class LandingState(BaseModel):
    """Where a run's work went: `state`, `how` it landed, `why` not, what to `run` next."""

    state: State
    how: str = ""  # merge, push, by hand, already (the target held its change)
    why: str = ""
    run: str = ""  # the command a person runs next

    def line(self) -> str:
        """One line for a terminal or a Markdown file."""
        return landing_line(self.model_dump())


def landing_state(run: RunRecord, land_now: str = "") -> LandingState:
    """The landing state the run's record holds, told by the loop's `land` today (`land_now`,
    "": the record's)."""
    return LandingState(**landing_fields(run, land_now))
