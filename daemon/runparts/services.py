"""What a run needs from whoever runs it (the daemon or `loopd once`), passed in as one object."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from daemon.clock import utc_now
from daemon.config import DaemonConfig
from daemon.home import Home
from daemon.model.client import ModelClient
from daemon.model.health import VerifierHealth
from daemon.retry import JUDGING, RetryPolicy
from daemon.state.eventtypes import Event
from daemon.state.store import StateStore

if TYPE_CHECKING:
    from daemon.model.client import ModelClient


@dataclass
class RunServices:
    """The home, its configuration and state, the clock, and the daemon's shutdown flag."""

    home: Home
    config: DaemonConfig
    store: StateStore
    clock: Callable[[], datetime] = utc_now
    notifications: Any = None  # daemon.people.notify.Notifications, when configured
    rule_cache: dict[Any, Any] = field(default_factory=dict)  # holds the one RuleLibrary
    judging_retry: RetryPolicy = JUDGING  # how a run waits for an unavailable verifier
    # One client per verifier configuration for the process's life (shared by copies made
    # on reload): what a server rejected (a response_format) is remembered across calls.
    clients: dict[str, Any] = field(default_factory=dict)
    # The verifier's reachability, shared (like `clients`) by the copies a reload makes.
    verifier: VerifierHealth = field(default_factory=VerifierHealth)
    slots: Any = None  # daemon.runs.slots.RunSlots in the daemon; None in `loopd once`
    # The daemon's RemoteFeed.wait_fetched: a hosted push's run waits for its fetch (the
    # delivery's trigger came before it); None where triggers follow their fetch.
    remote_fetch: Any = None
    # False on a Temporal worker whose state/ and rules/ are not the home's: the agent's
    # note_knowledge is refused there (a note would land in that machine's rules/ only).
    notes_taken: bool = True
    # Called with the run as it parks on a usage limit (`loopd once` says so at once).
    on_park: Callable[[Any], None] | None = None

    def event(
        self, type: Event, loop: str | None = None, run: str | None = None, **fields: Any
    ) -> dict[str, Any]:
        return self.store.events.append(type, self.clock(), loop=loop, run=run, **fields)

    def model_client(self, second: bool = False) -> ModelClient | None:
        """The verifier's client, None when no `[verifier] base_url` is configured;
        `second`: the client of `[verifier] second`, None when there is none."""
        verifier = self.config.verifier if not second else self.config.second_judge()
        if verifier is None or not verifier.configured:
            return None
        key = verifier.model_dump_json()
        client = self.clients.get(key)
        if client is None:
            client = self.clients[key] = ModelClient(verifier)
        return client
