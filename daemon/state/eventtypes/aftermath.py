"""The fields of the events of a landed run followed on its target (docs/aftermath.md)."""

from __future__ import annotations

from daemon.state.eventtypes.base import EventFields, described, fields_of
from daemon.state.eventtypes.names import Event


@fields_of(Event.AFTERMATH_STARTED)
class AftermathStarted(EventFields):
    """loopd began to follow a landed run on its target: its commits and lines."""

    target: str
    commits: list[str]
    lines: int


@fields_of(Event.AFTERMATH_CHANGED)
class AftermathChanged(EventFields):
    """A landed run's state on its target changed (kept, edited, reverted, gone)."""

    state: str
    was: str
    lines_landed: int
    lines_kept: int
    by: list[str] = described("the person's commits that changed it: `SHA author: subject`", [])


@fields_of(Event.AFTERMATH_FAILED)
class AftermathFailed(EventFields):
    """A landed run could not be followed this time (its repository gone, git failed)."""

    error: str


@fields_of(Event.AFTERMATH_RECOUNTED)
class AftermathRecounted(EventFields):
    """A person reverted a landed run: the rules it followed count it as harm, not help."""

    rules: list[str]


@fields_of(Event.LAND_HELD)
class LandHeld(EventFields):
    """A loop's landings were reverted `revert_limit` times in 7 days: its runs land on
    their branch until the escalation is resolved."""

    was: str
    runs: list[str]
    escalation: str


@fields_of(Event.LAND_RESTORED)
class LandRestored(EventFields):
    """The escalation of a loop held at `land = "branch"` was resolved: it lands as it says."""

    escalation: str
