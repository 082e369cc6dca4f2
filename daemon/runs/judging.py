"""Judging an attempt: checks, protected paths, the user's repository, then the critic.

Judging returns a `Judgement` and never ends the run: a verifier that stays unavailable past
`pending_limit` raises VerifierGaveUp, a stopped run RunStopped; the executor decides. While
it waits for the verifier the run holds no run slot (it takes one again before its next
attempt), and each call's outcome feeds the verifier's health for status and notifications.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from daemon.config import LoopConfig
from daemon.git.guards import protect_violations
from daemon.git.integrity import add_violations, guard_of
from daemon.git.tree import RunTree
from daemon.model.client import ModelUnavailable
from daemon.model.critic import both, judge, unjudged
from daemon.model.evidence import build_evidence
from daemon.runparts.checks import ChecksResult
from daemon.runparts.checktree import CheckTree
from daemon.runparts.decisions import missing_programs
from daemon.runparts.journal import RunJournal
from daemon.runparts.services import RunServices
from daemon.runparts.stop import StopToken
from daemon.runs.attemptresult import CheckedCommit
from daemon.runs.slots import release_slot
from daemon.runs.testweigh import check_violations, weigh_tests
from daemon.state.atomic import write_atomic
from daemon.state.eventtypes import Event
from daemon.state.records import CHECK_KINDS, AttemptRecord, Violation
from daemon.state.store import dump_toml

if TYPE_CHECKING:
    from daemon.model.critic import Verdict


class VerifierGaveUp(Exception):
    """The verifier stayed unavailable for `pending_limit`: the attempt cannot be judged."""

    def __init__(self, waited_seconds: int, limit_seconds: int, error: str) -> None:
        self.waited_seconds = waited_seconds
        self.limit_seconds = limit_seconds
        self.error = error
        super().__init__(
            f"verifier unavailable for {waited_seconds}s (pending_limit {limit_seconds}s)"
        )


@dataclass
class Judgement:
    """What judging found: the checks, the violations, and the verdict."""

    checks: ChecksResult
    violations: list[Violation]
    verdict: Verdict

    @property
    def passed(self) -> bool:
        return self.verdict.passed


def judge_attempt(
    services: RunServices,
    journal: RunJournal,
    stop: StopToken,
    tree: RunTree,
    cfg: LoopConfig,
    attempt: AttemptRecord,
    head: str,
    checked: CheckedCommit | None = None,
    rules: list[tuple[str, str]] | None = None,
    since: str = "",
) -> Judgement:
    """Checks, violations and the critic's verdict of `attempt`, committed at `head`.

    `rules`: (id, text) of the rules in the attempt's prompt, for the critic to attribute.
    `since`: what the agent's changes are measured from when not the run's base (a conflict
    attempt's: the merge it was given, whose other side's changes are not the agent's).
    """
    folder = journal.attempt_dir(attempt.n)
    if checked is not None and checked.commit == head:
        # The agent stopped, the checks ran on this very commit, nothing changed since.
        checks = checked.checks
    else:
        # On a clean tree of the commit, in the run's sandbox: the checks run code the agent
        # wrote, and only what the branch holds may decide.
        checks = CheckTree(journal, tree, cfg).run(head, cfg.done_when, None, stop)
    weigh_tests(journal, tree, cfg, checks, stop)
    write_atomic(folder / "checks.log", checks.log())
    if checks.passed:
        journal.run.verified_tree = tree.own.tree_of(head)
    write_atomic(folder / "checks-failed.txt", checks.failure_tail())
    attempt.checks_passed = checks.passed  # recorded now: the critic may keep the run waiting
    attempt.checks_missing = missing_programs([(r.command, r.exit_code) for r in checks.results])
    journal.save()
    journal.event(
        Event.CHECKS,
        attempt=attempt.n,
        passed=checks.passed,
        results=[{"command": r.command, "exit_code": r.exit_code} for r in checks.results],
    )
    violations = _violations(journal, tree, cfg, attempt, head, checks, since)
    texts = [v.text() for v in violations]
    verifier = services.config.verifier
    if cfg.critic == "off" or not verifier.configured:
        why = 'critic = "off"' if cfg.critic == "off" else "no [verifier] configured"
        ids = [rule_id for rule_id, _ in rules or []]
        return Judgement(checks, violations, unjudged(checks.passed, texts, why, ids))
    verdict = _ask_critic(services, journal, stop, cfg, attempt, checks, texts, rules)
    return Judgement(checks, violations, verdict)


def _violations(
    journal: RunJournal,
    tree: RunTree,
    cfg: LoopConfig,
    attempt: AttemptRecord,
    head: str,
    checks: ChecksResult,
    since: str,
) -> list[Violation]:
    """What the attempt may not have done: protected paths changed since `since` (else the
    run's base), the guards' findings, the checks' own (weakened tests)."""
    # The checks ran code the agent wrote: the user's repository is looked at again.
    guard = guard_of(journal, tree)
    add_violations(attempt, guard.check() if guard is not None else [])
    before = since or journal.run.base_commit
    violations = [
        Violation(kind="protected", target=path)
        for path in protect_violations(tree.own.bare, before, head, cfg.protect)
    ]
    violations += [v for v in attempt.violations if v.kind not in ("protected", *CHECK_KINDS)]
    violations += check_violations(checks)
    if violations:
        journal.event(
            Event.VIOLATIONS, attempt=attempt.n, violations=[v.model_dump() for v in violations]
        )
    return violations


def _ask_critic(
    services: RunServices,
    journal: RunJournal,
    stop: StopToken,
    cfg: LoopConfig,
    attempt: AttemptRecord,
    checks: ChecksResult,
    violations: list[str],
    rules: list[tuple[str, str]] | None = None,
    evidence: Any = None,
) -> Verdict:
    """The critic's verdict, waiting with the judging retry policy while it is unavailable.

    `evidence` is the attempt's bundle when another machine built it; else it is built here.
    """

    verifier = services.config.verifier
    if evidence is None:
        evidence = build_evidence(
            journal.attempt_dir(attempt.n),
            cfg.task,
            attempt.summary,
            verifier.evidence_tokens,
            violations,
        )
    client = services.model_client()
    assert client is not None  # judging asks the critic only when a verifier is configured
    second = services.model_client(second=True)
    limit = verifier.pending_limit.total_seconds()
    tries = 0
    while True:
        try:
            verdict = judge(client, evidence, cfg.critic_threshold, checks.passed, rules)
            if second is not None:  # [verifier] second: both judges must pass the attempt
                other = judge(second, evidence, cfg.critic_threshold, checks.passed, rules)
                verdict = both(verdict, other)
        except ModelUnavailable as exc:
            services.verifier.failed(str(exc), services.clock())
            if tries == 0:
                # Waiting for the verifier holds no run slot: another loop's run may work.
                release_slot(services.slots, journal.run.id)
            tries += 1
            since = journal.run.judging_since or services.clock()
            waited = (services.clock() - since).total_seconds()
            journal.event(
                Event.VERIFIER_UNAVAILABLE,
                attempt=attempt.n,
                error=str(exc)[:300],
                waited_seconds=int(waited),
            )
            if waited >= limit:
                raise VerifierGaveUp(int(waited), int(limit), str(exc)[:300]) from None
            stop.raise_if_stopped()
            journal.beat()
            # Never past pending_limit: the last try comes as the limit ends.
            if stop.wait(min(services.judging_retry.delay(tries), limit - waited)):
                stop.raise_if_stopped()
        else:
            services.verifier.answered(services.clock())
            return verdict


ask_critic = _ask_critic  # for an engine that judges evidence another machine gathered


def record_verdict(journal: RunJournal, attempt: AttemptRecord, verdict: Verdict) -> None:
    """The verdict into the attempt's record (attribution included), verdict.toml, an event."""
    attempt.score = verdict.score
    attempt.verdict = verdict.verdict
    attempt.feedback = verdict.feedback
    attempt.judged = verdict.judged
    # The critic's attribution is what rule counters (helped, harmed, idle) are made of.
    attempt.rules_followed = list(verdict.rules_followed)
    attempt.rules_irrelevant = list(verdict.rules_irrelevant)
    attempt.attributed = verdict.attributed
    journal.run.judging_since = None
    journal.save()
    write_atomic(journal.attempt_dir(attempt.n) / "verdict.toml", dump_toml(verdict))
    attribution = (
        {"rules_followed": verdict.rules_followed, "rules_irrelevant": verdict.rules_irrelevant}
        if verdict.attributed
        else {}
    )
    journal.event(
        Event.VERDICT,
        attempt=attempt.n,
        passed=verdict.passed,
        score=verdict.score,
        judged=verdict.judged,
        verdict=verdict.verdict,
        **attribution,
    )
