"""A landed run's aftermath as people read it: one line, a JSON object, a loop's tally."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from daemon.plain.aftermath import aftermath_object, aftermath_text
from daemon.state.aftermath import Aftermath, LaterCommit

TALLY_WINDOW = "7d"
STATES = ("kept", "edited", "reverted", "gone")


def aftermath_json(record: Aftermath) -> dict[str, Any]:
    """The `aftermath` object of `loopd show --json` and `loopd aftermath --json`."""
    return aftermath_object(record.model_dump())


def aftermath_line(record: Aftermath) -> str:
    """The state in one line: `edited: 7 of 10 lines kept (30% changed) by Ann, after 7d`."""
    return aftermath_text(record.model_dump())


def _commit_json(commit: LaterCommit) -> dict[str, Any]:
    return {**commit.model_dump(mode="json"), "date": commit.date.isoformat()}


def commit_line(commit: LaterCommit) -> str:
    kind = "revert" if commit.revert else f"+{commit.added}/-{commit.removed}"
    return f"{commit.commit[:12]} {commit.author} ({kind}): {commit.message}"


@dataclass
class Tally:
    """A loop's or an agent's landed runs after `window`: kept, edited, reverted, gone."""

    name: str
    window: str = TALLY_WINDOW
    counts: dict[str, int] = field(default_factory=dict)
    reverts: list[tuple[str, LaterCommit]] = field(default_factory=list)  # (run, commit)
    edits: list[tuple[str, LaterCommit]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def line(self) -> str:
        """`kept after 7 days: 23 of 25 (92%), edited 1, reverted 1`."""
        kept = self.counts.get("kept", 0)
        days = self.window.rstrip("d")
        text = f"kept after {days} days: {kept} of {self.total} ({kept / self.total:.0%})"
        for state in ("edited", "reverted", "gone"):
            if self.counts.get(state):
                text += f", {state} {self.counts[state]}"
        return text

    def as_json(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "landed": self.total,
            **{state: self.counts.get(state, 0) for state in STATES},
            "reverts": [{"run": run, **_commit_json(c)} for run, c in self.reverts],
            "edits": [{"run": run, **_commit_json(c)} for run, c in self.edits],
        }


def tallies(
    records: Iterable[tuple[str, Aftermath]], window: str = TALLY_WINDOW
) -> dict[str, Tally]:
    """Per name (a loop, an agent), the runs whose `window` was reached, by their state then."""
    found: dict[str, Tally] = {}
    for name, record in records:
        mark = record.windows.get(window)
        if mark is None or mark.state == "pending":
            continue
        tally = found.setdefault(name, Tally(name, window))
        tally.counts[mark.state] = tally.counts.get(mark.state, 0) + 1
        until = [c for c in record.commits if c.date <= mark.checked_at]
        tally.reverts += [(record.run, c) for c in until if c.revert]
        if mark.state == "edited":
            tally.edits += [(record.run, c) for c in until if not c.revert]
    return found
