"""The fields of the triggers' events: the inbox, the schedule, the queue, watchers, remotes."""

from __future__ import annotations

from daemon.state.eventtypes.base import EventFields, described, fields_of
from daemon.state.eventtypes.names import Event
from daemon.state.records import TriggerKind


class TriggerOffered(EventFields):
    """A trigger the daemon took, as it records what it did with it."""

    kind: TriggerKind
    reason: str
    inbox: str | None = described("the inbox file it came in", None)
    ref: str = ""
    old: str = ""
    new: str = ""
    remote: str = described("the [remotes.NAME] a push came from", "")


@fields_of(Event.TRIGGER)
class TriggerEvent(TriggerOffered):
    """A trigger was queued for a run, or joined one already queued."""

    joined: bool = described("it went into a run queued before it", False)
    via: str = described("`once`: `loopd once` ran it, not the daemon", "")


@fields_of(Event.TRIGGER_MERGED)
class TriggerMerged(TriggerOffered):
    """A trigger was merged into a pending run."""

    into: str


@fields_of(Event.TRIGGER_SKIPPED)
class TriggerSkipped(EventFields):
    """A trigger started nothing: the overlap policy, a filter, an open escalation."""

    why: str
    kind: TriggerKind | None = None
    reason: str = ""
    inbox: str | None = None
    ref: str = ""
    old: str = ""
    new: str = ""
    remote: str = ""
    escalation: str = described("the open escalation that holds the loop's task", "")


@fields_of(Event.TRIGGER_REJECTED)
class TriggerRejected(EventFields):
    """An inbox file was no valid trigger: set aside in inbox/bad/."""

    file: str
    reason: str


@fields_of(Event.SCHEDULE_MISSED)
class ScheduleMissed(EventFields):
    """A scheduled fire was missed while loopd was down (the latest recent one is caught up)."""

    fire: str
    why: str
    unlisted_until: str = described("more misses up to then are not listed one by one", "")


@fields_of(Event.CLOCK_STEPPED_BACK)
class ClockSteppedBack(EventFields):
    """The wall clock stepped back past a loop's schedule cursor: it goes on from the new now."""

    handled_until: str = described("the cursor before: fires up to then had been handled")
    clock: str = described("the clock's new time, where the schedule goes on from")


@fields_of(Event.QUEUE_UNREADABLE)
class QueueUnreadable(EventFields):
    """queue.toml could not be read: set aside."""

    file: str
    error: str


@fields_of(Event.QUEUE_ENTRY_DROPPED)
class QueueEntryDropped(EventFields):
    """A queued run was dropped at start: its loop is no longer valid."""

    error: str


@fields_of(Event.LOOP_PAUSED)
class LoopPaused(EventFields):
    """`loopd pause`: the loop's triggers wait."""

    by: str = described("who paused it: `web` for the console; absent for the command line", "")


@fields_of(Event.LOOP_RESUMED)
class LoopResumed(EventFields):
    """`loopd resume`: the loop runs again."""

    by: str = described("who resumed it: `web` for the console; absent for the command line", "")


@fields_of(Event.WATCH_RESCAN)
class WatchRescan(EventFields):
    """A file watcher looked at the whole tree again (events were lost)."""

    reason: str
    changed: int
    mode: str


@fields_of(Event.WATCH_FALLBACK)
class WatchFallback(EventFields):
    """A watcher polls instead of using inotify."""

    reason: str


@fields_of(Event.WATCH_FAILED)
class WatchFailed(EventFields):
    """A watcher could not start."""

    error: str
    what: str = ""


@fields_of(Event.WEBHOOK_ACCEPTED)
class WebhookAccepted(EventFields):
    """A signed push delivery was accepted: the loops it triggers."""

    kind: str
    remote: str
    delivery: str
    ref: str
    old: str
    new: str
    loops: list[str]


@fields_of(Event.WEBHOOK_IGNORED)
class WebhookIgnored(EventFields):
    """A valid delivery that triggers nothing (not a push, a deleted branch, ...)."""

    kind: str
    remote: str
    delivery: str
    ref: str = ""
    why: str


@fields_of(Event.WEBHOOK_REFUSED)
class WebhookRefused(EventFields):
    """A delivery was refused: unsigned, a bad signature, replayed, unknown, malformed, slow.
    Sampled: the first 10 per service and status each minute; what a client sent is cut to
    120 characters."""

    kind: str
    status: int
    why: str
    source: str
    delivery: str = ""
    remote: str = ""


@fields_of(Event.WEBHOOK_REFUSALS_COUNTED)
class WebhookRefusalsCounted(EventFields):
    """Refusals of one service and status past the minute's first 10: counted, not written."""

    kind: str
    status: int
    count: int
    since: str = described("when the minute they were counted in began")


@fields_of(Event.REMOTE_FEED_ERROR)
class RemoteFeedError(EventFields):
    """Handling a remote's push failed."""

    error: str


@fields_of(Event.REMOTE_FETCH_FAILED)
class RemoteFetchFailed(EventFields):
    """The fetch of a remote push failed: a poll's push gets no trigger; a delivery's run
    (triggered as it came) ends in `error` before its tree is made."""

    remote: str
    ref: str
    new: str
    error: str


@fields_of(Event.REMOTE_POLL_FAILED)
class RemotePollFailed(EventFields):
    """Polling a remote with `git ls-remote` failed."""

    error: str
    remote: str = ""


@fields_of(Event.REMOTE_POLL_BACKOFF)
class RemotePollBackoff(EventFields):
    """Polling a remote waits longer after failures."""

    remote: str
    retry_in: float


@fields_of(Event.REMOTE_POLL_RECOVERED)
class RemotePollRecovered(EventFields):
    """Polling a remote works again."""

    remote: str


@fields_of(Event.HELD)
class Held(TriggerSkipped):
    """A schedule's fire held back by an open escalation: once a hold, not once a fire."""


@fields_of(Event.SKIPS_COUNTED)
class SkipsCounted(EventFields):
    """A streak of a timer's fires skipped for one reason ended: how many, from when to when."""

    of: str = described("the type of the streak's first event (trigger_skipped, held)")
    why: str
    count: int
    since: str
    until: str
    escalation: str = ""


@fields_of(Event.RETRY_NOT_RUN)
class RetryNotRun(EventFields):
    """A retry of an interrupted run could not run (its loop disabled or not loaded)."""

    why: str
