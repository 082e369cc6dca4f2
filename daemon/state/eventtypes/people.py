"""The fields of the events that concern people: escalations and notifications."""

from __future__ import annotations

from daemon.state.eventtypes.base import EventFields, described, fields_of
from daemon.state.eventtypes.names import Event


@fields_of(Event.ESCALATED)
class Escalated(EventFields):
    """The run's escalation file was written: a person looks next."""

    reason: str
    cause: str
    file: str
    repeat_of: str = described("the open escalation this run counts in, when a repeat", "")
    count: int = described("that escalation's count of runs, this one included", 0)


@fields_of(Event.ESCALATION_RESOLVED)
class EscalationResolved(EventFields):
    """A person resolved an escalation (`loopd escalations resolve`)."""

    note: str
    retry: bool
    trigger: str = described("the retry's inbox file, or empty")
    by: str = described("who resolved it: `web` for the console; absent for the command line", "")


@fields_of(Event.ESCALATION_SUPERSEDED)
class EscalationSuperseded(EventFields):
    """A later run of the task succeeded: its open escalation was closed."""

    by: str


@fields_of(Event.ANSWER_KEPT)
class AnswerKept(EventFields):
    """A person's answer to an agent's question was kept for the loop's later runs."""

    file: str = described("where it is kept, under state/: answers/LOOP.md")


@fields_of(Event.NOTIFIED)
class Notified(EventFields):
    """A notifier delivered a notification."""

    kind: str
    notifier: str


@fields_of(Event.NOTIFY_FAILED)
class NotifyFailed(EventFields):
    """A notifier failed to deliver."""

    kind: str
    notifier: str
    error: str
    asked: str = ""
