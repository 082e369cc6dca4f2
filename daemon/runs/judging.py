"""Judging an attempt: checks, protected paths, the user's repository, then the critic.

Judging returns a `Judgement` and never ends the run: a verifier that stays unavailable past
`pending_limit` raises VerifierGaveUp, a stopped run RunStopped; the executor decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from daemon.config import LoopConfig
from daemon.runs.attempt import CheckedCommit, checks_env
from daemon.runs.checks import ChecksResult, run_checks
from daemon.runs.guards import protect_violations
from daemon.runs.integrity import add_violations, guard_of
from daemon.runs.journal import RunJournal
from daemon.runs.services import RunServices
from daemon.runs.stop import StopToken
from daemon.runs.tree import RunTree
from daemon.state.atomic import write_atomic
from daemon.state.records import AttemptRecord, Violation

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
) -> Judgement:
    """Checks, violations and the critic's verdict of `attempt`, committed at `head`."""
    from daemon.model.critic import unjudged

    folder = journal.attempt_dir(attempt.n)
    if checked is not None and checked.commit == head:
        # The agent stopped, the checks ran on this very commit, nothing changed since.
        checks = checked.checks
        write_atomic(folder / "checks.log", checks.log())
    else:
        checks = run_checks(
            cfg.done_when,
            tree.path,
            cfg.check_timeout.total_seconds(),
            checks_env(services),
            folder / "checks.log",
            stop,
        )
    write_atomic(folder / "checks-failed.txt", checks.failure_tail())
    attempt.checks_passed = checks.passed  # recorded now: the critic may keep the run waiting
    journal.save()
    journal.event(
        "checks",
        attempt=attempt.n,
        passed=checks.passed,
        results=[{"command": r.command, "exit_code": r.exit_code} for r in checks.results],
    )
    # The checks ran code the agent wrote: the user's repository is looked at again.
    guard = guard_of(journal, tree)
    add_violations(attempt, guard.check() if guard is not None else [])
    violations = [
        Violation(kind="protected", target=path)
        for path in protect_violations(tree.own.bare, journal.run.base_commit, head, cfg.protect)
    ]
    violations += [v for v in attempt.violations if v.kind != "protected"]
    if violations:
        journal.event(
            "violations", attempt=attempt.n, violations=[v.model_dump() for v in violations]
        )
    texts = [v.text() for v in violations]
    verifier = services.config.verifier
    if cfg.critic == "off" or not verifier.configured:
        why = 'critic = "off"' if cfg.critic == "off" else "no [verifier] configured"
        return Judgement(checks, violations, unjudged(checks.passed, texts, why))
    verdict = _ask_critic(services, journal, stop, cfg, attempt, checks, texts)
    return Judgement(checks, violations, verdict)


def _ask_critic(
    services: RunServices,
    journal: RunJournal,
    stop: StopToken,
    cfg: LoopConfig,
    attempt: AttemptRecord,
    checks: ChecksResult,
    violations: list[str],
) -> Verdict:
    """The critic's verdict, waiting with the judging retry policy while it is unavailable."""
    from daemon.model.client import ModelUnavailable
    from daemon.model.critic import judge
    from daemon.model.evidence import build_evidence

    verifier = services.config.verifier
    evidence = build_evidence(
        journal.attempt_dir(attempt.n),
        cfg.task,
        attempt.summary,
        verifier.evidence_tokens,
        violations,
    )
    client = services.model_client()
    assert client is not None  # judging asks the critic only when a verifier is configured
    limit = verifier.pending_limit.total_seconds()
    tries = 0
    while True:
        try:
            return judge(client, evidence, cfg.critic_threshold, checks.passed)
        except ModelUnavailable as exc:
            tries += 1
            since = journal.run.judging_since or services.clock()
            waited = (services.clock() - since).total_seconds()
            journal.event(
                "verifier_unavailable",
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
