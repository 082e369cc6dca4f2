"""Where a run meets the rule library: selecting its rules, and learning from its attempts.

A lesson the model could not take (the endpoint down during the post-mortem) is kept in
`state/deferred/RUN_ID-N.toml` and taken up again by `retry_deferred_lessons` once the
endpoint answers: at the start of each run's learning, and on the daemon's tick.
"""

from __future__ import annotations

import os
import threading
import tomllib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from daemon.config import Loop
from daemon.model.client import ModelUnavailable
from daemon.model.evidence import build_evidence
from daemon.redact import redact
from daemon.regularfile import STATE_MAX, read_regular
from daemon.rules.evaluator import render_rules, select_rules
from daemon.rules.judge_cache import JudgeCache
from daemon.rules.kinds import learn_decisions
from daemon.rules.library import RuleLibrary
from daemon.rules.postmortem import learn_from_attempt as post_mortem
from daemon.rules.promotion import Attribution
from daemon.rules.replay import judge_cache as state_cache
from daemon.runparts import decisions
from daemon.runparts.journal import RunJournal
from daemon.runparts.services import RunServices
from daemon.state.atomic import write_atomic
from daemon.state.eventtypes import Event
from daemon.state.records import AttemptRecord, Record, RunRecord, is_experiment
from daemon.state.store import dump_toml

DEFERRED = "deferred"
DEFERRED_PER_RUN = 3  # deferred lessons a run retries before its own, so it is not held long
_retrying = threading.Lock()  # one retry of the deferred lessons at a time in a process


@dataclass
class RuleChoice:
    """The rules a run's prompts carry, and a rule that stops the run before any agent."""

    reminders: list[Any] = field(default_factory=list)  # Rule objects, for the prompt
    rule_ids: list[str] = field(default_factory=list)
    refuse: str = ""  # id of a matched rule of severity refuse
    escalate: str = ""  # id of a matched rule of severity escalate

    @property
    def text(self) -> str:
        """The body of the prompt's `# Rules from earlier runs`."""
        return render_rules(self.reminders)

    def add(self, rule: Any) -> None:
        """A rule learned during the run: it goes into the next attempt's prompt."""
        self.reminders.append(rule)
        self.rule_ids.append(rule.id)


def rule_library(services: RunServices) -> RuleLibrary:
    """One rule library per process; it re-reads changed files on every call."""
    library = services.rule_cache.get("library")
    if library is None:
        library = RuleLibrary(services.home.rules_dir)
        services.rule_cache["library"] = library
    return library


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


def judge_cache(services: RunServices) -> JudgeCache:
    """The trigger evaluator's cache, kept under state/ where `loopd replay` reads it."""
    cache = services.rule_cache.get("judge")
    if cache is None:
        cache = services.rule_cache["judge"] = state_cache(services.store)
    return cache


def select_rules_for_run(services: RunServices, loop: Loop, run: RunRecord) -> RuleChoice:
    """Pick the rules that apply to this run's task (lexical, then one model call)."""
    selection = select_rules(
        rule_library(services),
        run_task_text(loop, run),
        loop.name,
        list(run.trigger.paths),
        services.model_client(),
        services.config.verifier,
        services.store.events,
        services.clock(),
        run=run.id,
        cache=judge_cache(services),
        repo=str(loop.config.repo_path),
    )
    choice = RuleChoice(reminders=list(selection.reminders), rule_ids=list(selection.ids))
    if selection.refuse:
        choice.refuse = selection.refuse[0].rule.id
    if selection.escalate:
        choice.escalate = selection.escalate[0].rule.id
    return choice


def rules_of_run(services: RunServices, run: RunRecord) -> RuleChoice:
    """The reminders a resumed run's prompts carry: the rules it fired, read back by id."""
    library = rule_library(services)
    choice = RuleChoice(rule_ids=list(run.rules_fired))
    for rule_id in run.rules_fired:
        stored = library.find(rule_id)
        # A rule deleted or retired by a person since is left out of the prompt.
        if stored is not None and stored.status in ("trial", "active"):
            if stored.rule.severity == "remind":
                choice.reminders.append(stored.rule)
    return choice


def rule_attribution(run: RunRecord) -> dict[str, Attribution]:
    """What the critic said of each rule that fired: "followed", "irrelevant" or "unknown".

    Followed in any judged attempt whose prompt held it: "followed". Else called irrelevant
    by every attempt that attributed it (at least one): "irrelevant". Else "unknown" (no
    critic, `critic = "off"`, or the critic named it in neither list).
    """
    out: dict[str, Attribution] = {}
    for rule_id in run.rules_fired:
        said = [a for a in run.attempts if a.attributed and rule_id in a.rules]
        if any(rule_id in a.rules_followed for a in said):
            out[rule_id] = "followed"
        elif said and all(rule_id in a.rules_irrelevant for a in said):
            out[rule_id] = "irrelevant"
        else:
            out[rule_id] = "unknown"
    return out


def _verdict(attempt: AttemptRecord) -> dict[str, Any]:
    return {
        "score": attempt.score,
        "verdict": attempt.verdict,
        "feedback": attempt.feedback,
        "checks_passed": attempt.checks_passed,
        "violations": [v.text() for v in attempt.violations],
    }


def _post_mortem(
    services: RunServices,
    client: Any,
    run: RunRecord,
    attempt: AttemptRecord,
    kind_hint: str | None,
) -> Any:
    """One post-mortem and its verification; raises ModelUnavailable when the model is down."""
    folder = services.store.attempt_dir(run.id, attempt.n)
    evidence = build_evidence(
        folder,
        run.task,
        attempt.summary,
        services.config.verifier.evidence_tokens,
        [v.text() for v in attempt.violations],
    )
    return post_mortem(
        rule_library(services),
        client,
        services.config.verifier,
        services.store.root,
        folder,
        _verdict(attempt),
        run.task,
        run.loop,
        run.id,
        services.store.events,
        services.clock(),
        evidence_text=evidence.render(),
        kind_hint=kind_hint,
        defer=True,
        note=run.trigger.note,
        repo=run.repo,
    )


def learn_from_attempt(
    services: RunServices,
    journal: RunJournal,
    max_attempts: int,
    attempt: AttemptRecord,
    passed: bool,
) -> Any:
    """Post-mortem of a failed attempt (or a skill after a late pass).

    Returns the verified rule (a Rule) for the next attempt's prompt, or None.
    """
    client = services.model_client()
    run = journal.run
    if client is None:
        return None
    retry_deferred_lessons(services, limit=DEFERRED_PER_RUN)
    if not decisions.post_mortem_after(passed, attempt.n):
        return None
    kind_hint = "skill" if passed else None
    try:
        result = _post_mortem(services, client, run, attempt, kind_hint)
    except ModelUnavailable as exc:
        path = defer_lesson(services, run, attempt.n, kind_hint, str(exc))
        journal.event(
            Event.RULE_DEFERRED,
            attempt=attempt.n,
            reason=str(exc)[:300],
            file=str(path.relative_to(services.store.root)),
        )
        return None
    if passed or attempt.n >= max_attempts or result.decision == "rejected":
        return None
    # A verified rule goes into the next attempt's prompt, whether or not its patterns
    # match this task (the post-mortem writes them for future tasks).
    rule_id = result.duplicate_of or result.rule.id
    stored = rule_library(services).find(rule_id)
    if stored is None or rule_id in run.rules_fired:
        return None
    return stored.rule


def learn_run_decisions(services: RunServices, run: RunRecord) -> list[Any]:
    """A succeeded run's recorded decisions (decisions.md) proposed as `decision` rules.

    Without a verifier model nothing is learned, as for post-mortems. When the model is
    down, the lesson is deferred (kind "decision") and taken up again like a post-mortem's.
    """
    if run.outcome != "succeeded" or is_experiment(run) or not run.attempts:
        return []
    client = services.model_client()
    if client is None:
        return []
    try:
        return _decisions(services, client, run)
    except ModelUnavailable as exc:
        path = defer_lesson(services, run, run.attempts[-1].n, "decision", str(exc))
        services.event(
            Event.RULE_DEFERRED,
            loop=run.loop,
            run=run.id,
            reason=str(exc)[:300],
            file=str(path.relative_to(services.store.root)),
        )
        return []


def _decisions(services: RunServices, client: Any, run: RunRecord) -> list[Any]:
    return learn_decisions(
        rule_library(services),
        client,
        services.config.verifier,
        services.store.events,
        services.store.root,
        run.id,
        run.loop,
        run.task,
        run.repo,
        services.clock(),
    )


# -- lessons deferred while the model was down ------------------------------------------------


class DeferredLesson(Record):
    """`state/deferred/RUN_ID-N.toml`: a post-mortem to take again when the model answers."""

    run: str
    loop: str
    attempt: int
    kind_hint: str = ""
    created: datetime
    tries: int = 1
    last_error: str = ""


def _deferred_dir(services: RunServices) -> Path:
    return services.store.root / DEFERRED


def defer_lesson(
    services: RunServices, run: RunRecord, n: int, kind_hint: str | None, error: str
) -> Path:
    """Keep the lesson of attempt `n` for later; returns its file."""
    path = _deferred_dir(services) / f"{run.id}-{n}.toml"
    lesson = DeferredLesson(
        run=run.id,
        loop=run.loop,
        attempt=n,
        kind_hint=kind_hint or "",
        created=services.clock(),
        last_error=redact(error)[:300],
    )
    write_atomic(path, dump_toml(lesson))
    return path


def deferred_lessons(services: RunServices) -> list[Path]:
    """The files of the lessons waiting for the model, oldest run first."""
    try:
        names = sorted(os.listdir(_deferred_dir(services)))
    except FileNotFoundError:
        return []
    return [
        _deferred_dir(services) / n for n in names if n.endswith(".toml") and not n.startswith(".")
    ]


def retry_deferred_lessons(services: RunServices, limit: int | None = None) -> int:
    """Take up the deferred lessons while the model answers; returns how many were taken.

    Stops at the first call the model fails again. The daemon's tick may call this; so does
    each run before its own learning.
    """
    paths = deferred_lessons(services)
    client = services.model_client() if paths else None
    if client is None or not _retrying.acquire(blocking=False):
        return 0
    done = 0
    try:
        for path in paths[:limit]:
            lesson, run, attempt = _load_lesson(services, path)
            if lesson is None or run is None or attempt is None:
                continue
            try:
                result = _take_lesson(services, client, run, attempt, lesson)
            except ModelUnavailable as exc:
                lesson.tries += 1
                lesson.last_error = redact(str(exc))[:300]
                write_atomic(path, dump_toml(lesson))
                break
            path.unlink(missing_ok=True)
            done += 1
            services.event(
                Event.RULE_DEFERRED_LEARNED,
                loop=run.loop,
                run=run.id,
                attempt=attempt.n,
                decision=result.decision if result else "none",
                rule=(result.duplicate_of or result.rule.id) if result else "",
            )
    finally:
        _retrying.release()
    return done


def _take_lesson(
    services: RunServices,
    client: Any,
    run: RunRecord,
    attempt: AttemptRecord,
    lesson: DeferredLesson,
) -> Any:
    """A deferred lesson's verdict: a post-mortem's, or the last of a run's decisions."""
    if lesson.kind_hint == "decision":
        verdicts = _decisions(services, client, run)
        return verdicts[-1] if verdicts else None
    return _post_mortem(services, client, run, attempt, lesson.kind_hint or None)


def _load_lesson(
    services: RunServices, path: Path
) -> tuple[DeferredLesson | None, RunRecord | None, AttemptRecord | None]:
    """The lesson, its run and attempt; a lesson that cannot be taken any more is dropped."""
    try:
        raw = read_regular(path, cap=STATE_MAX).decode("utf-8")
        lesson = DeferredLesson.model_validate(tomllib.loads(raw))
    except FileNotFoundError:
        return None, None, None  # taken by another process meanwhile
    except (OSError, ValueError) as exc:
        _drop(services, path, None, f"unreadable: {exc}")
        return None, None, None
    try:
        run = services.store.load_run(lesson.run)
    except (OSError, ValueError) as exc:
        _drop(services, path, lesson, f"its run.toml is unreadable: {exc}")
        return lesson, None, None
    attempt = next((a for a in run.attempts if a.n == lesson.attempt), None)
    folder = services.store.run_dir(run.id) / f"attempt-{lesson.attempt}"
    if attempt is None or not folder.is_dir():
        _drop(services, path, lesson, "its attempt folder is gone")
        return lesson, run, None
    return lesson, run, attempt


def _drop(services: RunServices, path: Path, lesson: DeferredLesson | None, why: str) -> None:
    path.unlink(missing_ok=True)
    services.event(
        Event.RULE_DEFERRED_DROPPED,
        loop=lesson.loop if lesson else None,
        run=lesson.run if lesson else None,
        file=f"{DEFERRED}/{path.name}",
        reason=why[:300],
    )
