"""A landed run's aftermath as people read it: one line, a JSON object, a loop's tally."""

from __future__ import annotations

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
