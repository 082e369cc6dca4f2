"""The fields of the daemon's and the workers' own events."""

from __future__ import annotations

from daemon.state.eventtypes.base import EventFields, described, fields_of
from daemon.state.eventtypes.names import Event


class Failed(EventFields):
    """Something the daemon does on its own failed; it goes on."""

    error: str


@fields_of(Event.DAEMON_STARTED)
class DaemonStarted(EventFields):
    """`loopd run` started."""

    pid: int
    version: str
    loops: list[str] = []
    broken: list[str] = described("loop files not loaded", [])
    engine: str = ""


@fields_of(Event.DAEMON_STOPPED)
class DaemonStopped(EventFields):
    """`loopd run` stopped."""

    pid: int
    seconds: float | None = None


@fields_of(Event.WORKER_STARTED)
class WorkerStarted(EventFields):
    """`loopd worker` started."""

    pid: int
    version: str
    engine: str


@fields_of(Event.WORKER_STOPPED)
class WorkerStopped(EventFields):
    """`loopd worker` stopped."""

    pid: int
    seconds: float


@fields_of(Event.LISTENING)
class Listening(EventFields):
    """`[listen]`: the webhook listener is up."""

    bind: str
    port: int


@fields_of(Event.TICK_ERROR)
class TickError(Failed):
    """A daemon tick raised; the next tick goes on."""


@fields_of(Event.STATE_FULL)
class StateFull(EventFields):
    """`state/` was full (a write found no room) and has room again: written once space
    returned, since nothing could be written meanwhile."""

    since: str = described("when a write first found no room (ISO 8601)")
    what: str = described("the write that failed first")
    seconds: float = described("how long `state/` was full")
    refused: int = described("writes refused meanwhile (deliveries answered 503, ticks)")
    escalation: str = described(
        "the spell's escalation (`state/escalations/ID.md`, cause `state-full`), left open", ""
    )


@fields_of(Event.CONFIG_ERROR)
class ConfigErrorEvent(EventFields):
    """A configuration file is broken."""

    file: str
    key: str
    message: str
    fix: str


@fields_of(Event.CONFIG_WARNING)
class ConfigWarning(EventFields):
    """A warning about the configuration (also in `loopd status`)."""

    message: str


@fields_of(Event.CONFIG_CHANGED_DURING_ATTEMPT)
class ConfigChangedDuringAttempt(EventFields):
    """The configuration changed while an agent that could write it was working."""

    files: list[str]
    runs: list[str]
    loops: list[str]


@fields_of(Event.RELOADED)
class Reloaded(EventFields):
    """The configuration was read again."""

    loops: list[str]
    changed: list[str]
    stale: list[str] = described("broken loop files whose last good version is kept")
    not_loaded: list[str]
    restart: list[str] = described("changes that wait for a restart")
    requests: list[str] = described("the `loopd reload` requests it answers")
    failed: dict[str, str] = described("loops the engine refused, with why", {})


@fields_of(Event.RELOAD_FAILED)
class ReloadFailed(Failed):
    """Reading the configuration again failed: the running one is kept."""

    requests: list[str] = []


@fields_of(Event.RESTART_NEEDED)
class RestartNeeded(EventFields):
    """Changes that take effect only after a restart."""

    changes: list[str]


@fields_of(Event.STATE_UNREADABLE)
class StateUnreadable(Failed):
    """A file under state/ could not be read."""

    file: str


@fields_of(Event.BUDGET_EXHAUSTED)
class BudgetExhausted(EventFields):
    """A daily token budget is spent: new runs wait until `until`."""

    scope: str = described("home or loop")
    day: str
    tokens: int
    limit: int
    until: str


@fields_of(Event.LOGIN_LIFTED)
class LoginLifted(EventFields):
    """`loopd check` found a held agent profile's login working: its loops run again."""

    profile: str
    held_by: str = described("the run whose refused login held it")
    escalation: str = described("the escalation resolved with it")


@fields_of(Event.VERIFIER_DOWN)
class VerifierDown(EventFields):
    """The verifier's model stopped answering."""

    since: str
    error: str


@fields_of(Event.VERIFIER_UP)
class VerifierUp(EventFields):
    """The verifier's model answers again."""

    down_since: str


@fields_of(Event.PRUNE_FAILED)
class PruneFailed(Failed):
    """Pruning old runs (`retain_days`) failed."""


@fields_of(Event.RETIRE_FAILED)
class RetireFailed(Failed):
    """Retiring expired rules failed."""


@fields_of(Event.DEFERRED_LESSONS_FAILED)
class DeferredLessonsFailed(Failed):
    """Retrying deferred post-mortems failed."""


@fields_of(Event.BRANCH_TIDY_FAILED)
class BranchTidyFailed(Failed):
    """Deleting the branches of landed runs failed; it is tried again in an hour."""


@fields_of(Event.EVENTS_PRUNED)
class EventsPruned(EventFields):
    """Rotated event files older than `retain_days` were deleted."""

    files: list[str]
    retain_days: int


@fields_of(Event.EVENTS_PRUNE_FAILED)
class EventsPruneFailed(Failed):
    """Deleting old rotated event files failed."""


@fields_of(Event.REPO_MAINTAINED)
class RepoMaintained(EventFields):
    """`git gc --auto` ran in a repository loopd fetches into (at most once a day)."""

    repo: str
    packs_before: int
    packs_after: int
    seconds: float
    skipped: str = described("why it did nothing (the repository's gc.auto = 0)", "")


@fields_of(Event.REPO_MAINTENANCE_FAILED)
class RepoMaintenanceFailed(Failed):
    """`git gc --auto` failed in a repository."""

    repo: str


@fields_of(Event.TRANSCRIPTS_COMPRESSED)
class TranscriptsCompressed(EventFields):
    """Finished runs' transcripts were gzipped."""

    files: int = described("how many transcripts")
    saved: int = described("bytes saved")


@fields_of(Event.STATE_EVICTED)
class StateEvicted(EventFields):
    """`state/` was over `state_max`: the oldest finished runs' transcripts went first, then
    their attempt folders, then the oldest rotated event files."""

    runs: list[str]
    count: int
    total: int
    limit: int
    events: list[str] = described("rotated event files deleted, oldest first", [])


@fields_of(Event.STATE_CAP_FAILED)
class StateCapFailed(Failed):
    """Measuring or evicting for `state_max` failed."""
