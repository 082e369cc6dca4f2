"""Judging an attempt: checks, protected paths, refs, then the critic on the local endpoint."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import TYPE_CHECKING

from daemon.runs.checks import ChecksResult, run_checks
from daemon.runs.git import Git
from daemon.runs.guards import check_refs, protect_violations, restore_refs
from daemon.state.atomic import write_atomic
from daemon.state.records import AttemptRecord

if TYPE_CHECKING:
    from daemon.model.critic import Verdict
    from daemon.runs.executor import RunExecutor

BACKOFF_START = 5.0
BACKOFF_MAX = 300.0


def _moved_by_someone_else(repo_git: Git, ref: str, own_branch: str) -> bool:
    """A ref now at a commit the run's branch does not hold: a person's commit or push.

    The agent can only point refs at what its tree holds (its own commits or their
    ancestors); a person's new commits on `main` during the run are not in the run's branch,
    and putting `main` back would undo their work.
    """
    now = repo_git.out("rev-parse", "-q", "--verify", f"{ref}^{{commit}}", check=False)
    if not now:
        return False
    ancestor = repo_git.run(
        "merge-base", "--is-ancestor", now, f"refs/heads/{own_branch}", check=False
    )
    return ancestor.returncode == 1


def ref_violations(executor: RunExecutor) -> list[str]:
    """Refs other than the run's own branch that moved during the attempt; they are put back."""
    tree = executor.tree
    assert tree is not None
    repo_git = Git(tree.repo)
    # check_refs leaves out refs/heads/loopd/*: other runs make and prune their branches.
    moved = []
    for ref in check_refs(repo_git, executor.run.refs_before, tree.branch):
        if _moved_by_someone_else(repo_git, ref, tree.branch):
            executor._event("ref_moved_outside_run", ref=ref)
            continue
        moved.append(ref)
    if not moved:
        return []
    now_refs = repo_git.refs()
    # The displaced commits are kept under refs/loopd/displaced/RUN/: a person's own commit
    # made during the attempt looks the same as an agent's and must not be lost.
    restore_refs(repo_git, executor.run.refs_before, moved, keep_as=executor.run.id)
    executor._event(
        "refs_restored",
        refs={
            r: {"was": executor.run.refs_before.get(r), "agent_set": now_refs.get(r)} for r in moved
        },
    )
    return [f"ref moved: {ref}" for ref in moved]


def judge_attempt(
    executor: RunExecutor, attempt: AttemptRecord, head: str
) -> tuple[ChecksResult, Verdict] | None:
    """Checks, violations and the critic's verdict; None when the run ended while waiting."""
    from daemon.model.critic import unjudged

    cfg = executor.cfg
    tree = executor.tree
    assert tree is not None
    folder = executor._attempt_dir(attempt.n)
    if executor.checked is not None and executor.checked[0] == head:
        # The agent stopped, the checks ran on this very commit, nothing changed since.
        checks = executor.checked[1]
        write_atomic(folder / "checks.log", checks.log())
    else:
        checks = run_checks(
            cfg.done_when,
            tree.path,
            cfg.check_timeout.total_seconds(),
            executor._checks_env(),
            folder / "checks.log",
        )
    executor.checked = None
    write_atomic(folder / "checks-failed.txt", checks.failure_tail())
    attempt.checks_passed = checks.passed  # recorded now: the critic may keep the run waiting
    executor._save()
    executor._event(
        "checks",
        attempt=attempt.n,
        passed=checks.passed,
        results=[{"command": r.command, "exit_code": r.exit_code} for r in checks.results],
    )
    violations = (
        [
            f"protected path changed: {path}"
            for path in protect_violations(tree.git, executor.run.base_commit, head, cfg.protect)
        ]
        if cfg.protect
        else []
    )
    violations += ref_violations(executor)
    if violations:
        executor._event("violations", attempt=attempt.n, violations=violations)

    verifier = executor.services.config.verifier
    if cfg.critic == "off" or not verifier.configured:
        why = 'critic = "off"' if cfg.critic == "off" else "no [verifier] configured"
        return checks, unjudged(checks.passed, violations, why)
    verdict = _ask_critic(executor, attempt, checks, violations)
    return None if verdict is None else (checks, verdict)


def _ask_critic(
    executor: RunExecutor, attempt: AttemptRecord, checks: ChecksResult, violations: list[str]
) -> Verdict | None:
    """The critic's verdict, waiting with backoff while the endpoint is unavailable."""
    from daemon.model.client import ModelUnavailable
    from daemon.model.critic import judge
    from daemon.model.evidence import build_evidence

    services = executor.services
    verifier = services.config.verifier
    folder = executor._attempt_dir(attempt.n)
    evidence = build_evidence(
        folder, executor.cfg.task, attempt.summary, verifier.evidence_tokens, violations
    )
    client = services.model_client()
    assert client is not None  # judging asks the critic only when a verifier is configured
    # Short verifier timeouts (tests, local servers) retry sooner.
    delay = min(BACKOFF_START, max(0.2, verifier.timeout.total_seconds()))
    pending_limit: timedelta = verifier.pending_limit
    while True:
        try:
            verdict = judge(client, evidence, executor.cfg.critic_threshold, checks.passed)
            break
        except ModelUnavailable as exc:
            since = executor.run.judging_since or services.clock()
            waited = services.clock() - since
            executor._event(
                "verifier_unavailable",
                attempt=attempt.n,
                error=str(exc)[:300],
                waited_seconds=int(waited.total_seconds()),
            )
            if waited >= pending_limit:
                executor._finish(
                    "escalated",
                    f"verifier unavailable for {int(waited.total_seconds())}s "
                    f"(pending_limit {int(pending_limit.total_seconds())}s)",
                    escalate=True,
                )
                return None
            executor._check_stop()
            executor.progress_at = time.monotonic()
            if executor._wakeup.wait(delay):
                executor._check_stop()
            delay = min(delay * 2, BACKOFF_MAX)
    return verdict
