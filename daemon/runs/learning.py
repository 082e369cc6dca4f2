"""Where a run meets the rule library and the people: rule selection, learning, the end of a run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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
    reminders: list[Any] = field(default_factory=list)  # Rule objects, for the prompt
    refuse: str = ""  # id of a matched rule of severity refuse
    escalate: str = ""  # id of a matched rule of severity escalate


def read_progress(services: RunServices, loop: str) -> str:
    """The loop's progress notes for `# Progress so far`."""
    from daemon.people.progress import read_progress as read

    return read(services.store, loop)


def rule_library(services: RunServices):  # noqa: ANN202 - RuleLibrary
    """One rule library per process; it re-reads changed files on every call."""
    from daemon.rules.library import RuleLibrary

    library = services.rule_cache.get("library")
    if library is None:
        library = RuleLibrary(services.home.rules_dir)
        services.rule_cache["library"] = library
    return library


def _client(services: RunServices):  # noqa: ANN202 - ModelClient | None
    return services.model_client()


def run_task_text(loop: Loop, run: RunRecord) -> str:
    """What the trigger evaluator matches: the task and the trigger's details."""
    # The reason is left out: a schedule's carries its fire time, which would defeat the
    # judge's cache (keyed by task text) on every fire.
    parts = [loop.config.task]
    trigger = run.trigger
    for value in (trigger.ref, trigger.note):
        if value:
            parts.append(value)
    return "\n".join(parts)


def select_rules_for_run(services: RunServices, loop: Loop, run: RunRecord) -> RuleChoice:
    """Pick the rules that apply to this run's task (lexical, then one model call)."""
    from daemon.rules.evaluator import render_rules, select_rules

    selection = select_rules(
        rule_library(services),
        run_task_text(loop, run),
        loop.name,
        list(run.trigger.paths),
        _client(services),
        services.config.verifier,
        services.store.events,
        services.clock(),
        run=run.id,
    )
    choice = RuleChoice(
        text=render_rules(selection.reminders),
        rule_ids=list(selection.ids),
        reminders=list(selection.reminders),
    )
    if selection.refuse:
        choice.refuse = selection.refuse[0].rule.id
    if selection.escalate:
        choice.escalate = selection.escalate[0].rule.id
    return choice


def learn_from_attempt(executor: RunExecutor, attempt: AttemptRecord, passed: bool) -> str | None:
    """Post-mortem of a failed attempt (or a skill after a late pass); new rules text, if any."""
    from daemon.model.evidence import build_evidence
    from daemon.rules.postmortem import learn_from_attempt as learn

    services = executor.services
    client = _client(services)
    run = executor.run
    if client is None:
        return None
    if passed and not any(a.n < attempt.n for a in run.attempts):
        return None  # a first-try pass teaches nothing new
    folder = executor._attempt_dir(attempt.n)
    evidence = build_evidence(
        folder,
        executor.cfg.task,
        attempt.summary,
        services.config.verifier.evidence_tokens,
        attempt.violations,
    )
    verdict = {
        "score": attempt.score,
        "verdict": attempt.verdict,
        "feedback": attempt.feedback,
        "checks_passed": attempt.checks_passed,
        "violations": attempt.violations,
    }
    result = learn(
        rule_library(services),
        client,
        services.config.verifier,
        services.store.root,
        folder,
        verdict,
        executor.cfg.task,
        executor.loop.name,
        run.id,
        services.store.events,
        services.clock(),
        evidence_text=evidence.render(),
        kind_hint="skill" if passed else None,
    )
    more_attempts = attempt.n < executor.cfg.max_attempts
    if passed or not more_attempts or result is None or result.decision == "rejected":
        return None
    # A verified rule goes into the next attempt's prompt, whether or not its patterns
    # match this task (the post-mortem writes them for future tasks).
    rule_id = result.duplicate_of or result.rule.id
    stored = rule_library(services).find(rule_id)
    if stored is None or rule_id in run.rules_fired:
        return None
    executor.rule_reminders.append(stored.rule)
    run.rules_fired.append(rule_id)
    services.event("rule_fired", loop=run.loop, run=run.id, rule=rule_id, why="learned")
    from daemon.rules.evaluator import render_rules

    return render_rules(executor.rule_reminders)


def after_run(executor: RunExecutor, escalate: bool) -> None:
    """Rule counters, progress notes, the escalation file and notifications."""
    from daemon.people.escalation import write_escalation
    from daemon.people.progress import update_progress

    services = executor.services
    run = executor.run
    now = services.clock()
    # Only runs whose agent worked count for or against their rules: a run refused or
    # escalated by a rule before any agent, or stopped by a person or a crash, says nothing.
    if run.rules_fired and run.attempts and run.outcome in ("succeeded", "escalated"):
        from daemon.rules.promotion import record_run

        record_run(
            rule_library(services),
            list(run.rules_fired),
            run.loop,
            run.task,
            run.outcome == "succeeded",
            services.store.events,
            now,
            state_root=services.store.root,
            run=run.id,
        )
    if escalate:
        path = write_escalation(services.store, run, now)
        executor._event(
            "escalated", reason=run.reason, file=str(path.relative_to(services.store.root))
        )
    update_progress(services.store, run.loop, now)
    notifications = services.notifications
    if notifications is None:
        return
    if escalate:
        notifications.escalated(run, services.store.escalation_path(run.id), now)
    else:
        notifications.run_finished(run, executor.cfg.notify_on, now)
