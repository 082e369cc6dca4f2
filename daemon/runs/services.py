"""What a run needs from whoever runs it (the daemon or `loopd once`), passed in as one object."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from daemon.clock import utc_now
from daemon.config import DaemonConfig
from daemon.home import Home
from daemon.state.store import StateStore


@dataclass
class RunServices:
    """The home, its configuration and state, the clock, and the daemon's shutdown flag."""

    home: Home
    config: DaemonConfig
    store: StateStore
    clock: Callable[[], datetime] = utc_now
    notifications: Any = None  # daemon.people.notify.Notifications, when configured
    rule_cache: dict[Any, Any] = field(default_factory=dict)  # holds the one RuleLibrary

    def event(self, type: str, loop: str | None = None, run: str | None = None, **fields: Any):
        return self.store.events.append(type, self.clock(), loop=loop, run=run, **fields)
