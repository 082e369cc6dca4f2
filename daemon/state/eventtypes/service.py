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
