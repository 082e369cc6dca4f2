"""Where a run meets the rule library and the people: rule selection, learning, the end of a run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from daemon.config import Loop
from daemon.runs.services import RunServices
from daemon.state.records import AttemptRecord, RunRecord

if TYPE_CHECKING:
    from daemon.runs.executor import RunExecutor


@dataclass
class RuleChoice:
    """The rules selected for a run, rendered for the prompt."""

    text: str = ""
    rule_ids: list[str] = field(default_factory=list)
    refuse: str = ""  # id of a matched rule of severity refuse
    escalate: str = ""  # id of a matched rule of severity escalate


def read_progress(services: RunServices, loop: str) -> str:
    """The loop's progress notes for `# Progress so far`."""
    from daemon.people.progress import read_progress as read

    return read(services.store, loop)


def select_rules_for_run(services: RunServices, loop: Loop, run: RunRecord) -> RuleChoice:
    """Pick the rules that apply to this run's task (lexical, then one model call)."""
    return RuleChoice()


def learn_from_attempt(executor: RunExecutor, attempt: AttemptRecord, passed: bool) -> str | None:
    """Post-mortem of a failed attempt; returns new prompt text for the rules section, if any."""
    return None


def after_run(executor: RunExecutor, escalate: bool) -> None:
    """Rule counters, progress notes, the escalation file and notifications."""
    from daemon.people.escalation import write_escalation
    from daemon.people.progress import update_progress

    services = executor.services
    run = executor.run
    now = services.clock()
    if escalate:
        path = write_escalation(services.store, run, now)
        executor._event("escalated", reason=run.reason, file=str(path.relative_to(services.store.root)))
    update_progress(services.store, run.loop, now)
    notifications = services.notifications
    if notifications is None:
        return
    if escalate:
        notifications.escalated(run, services.store.escalation_path(run.id), now)
    else:
        notifications.run_finished(run, executor.cfg.notify_on, now)
