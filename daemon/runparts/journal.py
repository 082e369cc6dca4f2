"""The run's record and files, with one owner: whatever changes them goes through here."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

from daemon.runparts.services import RunServices
from daemon.state.eventtypes import Event
from daemon.state.records import RunRecord


class RunJournal:
    """`run.toml`, the run's events and attempt folders, and a heartbeat on the monotonic clock."""

    def __init__(self, services: RunServices, run: RunRecord) -> None:
        self.services = services
        self.run = run
        self.heartbeat = time.monotonic()  # the last sign of progress

    def now(self) -> datetime:
        return self.services.clock()

    def beat(self) -> None:
        """Record progress without saving (a long wait, an agent's output)."""
        self.heartbeat = time.monotonic()

    def idle_for(self, now_monotonic: float) -> float:
        """Seconds since the last sign of progress."""
        return now_monotonic - self.heartbeat

    def save(self) -> None:
        """Write run.toml (atomically, durably)."""
        self.beat()
        self.services.store.save_run(self.run)

    def save_behind(self) -> None:
        """Write run.toml durably on a thread of its own; `settle()` (or the next save)
        waits for it: what must be durable before a step is settled before the step."""
        self.beat()
        self.services.store.save_run_behind(self.run)

    def settle(self) -> None:
        """Wait until the record saved on its own thread is durable; raise what failed."""
        self.services.store.settle_run(self.run.id)

    def event(self, type: Event, **fields: Any) -> None:
        """Append an event of this run to `state/events.jsonl`."""
        self.services.event(type, loop=self.run.loop, run=self.run.id, **fields)

    def attempt_dir(self, n: int) -> Path:
        """`state/runs/RUN_ID/attempt-N/`, made when missing."""
        return self.services.store.attempt_dir(self.run.id, n)
