"""What the git layer needs of a run's journal: its record, the clock, events, the state store.

`daemon.runparts.journal.RunJournal` is the one implementation; the git layer sits below the run
and names only what it uses.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from daemon.state.eventtypes import Event
from daemon.state.records import RunRecord


class RunLog(Protocol):
    """A run's record and the services that write it (RunJournal)."""

    run: RunRecord
    services: Any  # daemon.runparts.services.RunServices: its store, clock and config

    def now(self) -> datetime: ...

    def save(self) -> None: ...

    def event(self, type: Event, **fields: Any) -> None: ...
