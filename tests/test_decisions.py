"""What comes next in a run, decided from its record alone (both engines ask these)."""

from __future__ import annotations

from datetime import UTC, datetime

from daemon.runparts import decisions
from daemon.state.records import AttemptRecord, Cause, Violation

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def attempt(n: int, **fields: object) -> AttemptRecord:
    return AttemptRecord(n=n, started=NOW, **fields)  # type: ignore[arg-type]


def test_a_run_gives_up_with_the_cause_its_last_attempt_shows() -> None:
    failing = [attempt(1, checks_passed=False), attempt(2, checks_passed=False)]
    assert decisions.given_up(failing, 7) == (
        "escalated",
        "attempts used up; checks still fail after 2 attempts",
        Cause.CHECKS_FAILED,
    )
    cut = [attempt(1, checks_passed=False, timed_out=True)]
    assert decisions.given_up(cut, 7).cause == Cause.TIMEOUTS
    protected = [
        attempt(1, checks_passed=True, violations=[Violation(kind="protected", target="t")])
    ]
    assert decisions.given_up(protected, 7).cause == Cause.PROTECT_VIOLATION
    moved = [attempt(1, checks_passed=True, violations=[Violation(kind="ref_moved", target="r")])]
    assert decisions.given_up(moved, 7).cause == Cause.REF_VIOLATION
    low = decisions.given_up([attempt(1, checks_passed=True, score=4)], 7)
    assert low.cause == Cause.CRITIC_REJECTED and "last score 4 below 7" in low.reason
    assert decisions.given_up([], 7).cause == Cause.LOOPD_ERROR


def test_an_agent_that_did_not_start_or_spent_the_budget_ends_the_run_before_judging() -> None:
    assert decisions.cut_short("", False, 10, 0) is None
    waited = decisions.cut_short("", False, 0, 0, "usage limit past max_wait")
    assert waited == ("escalated", "usage limit past max_wait", Cause.QUOTA_WAIT_EXCEEDED)
    assert decisions.cut_short("no such file", False, 0, 0).cause == Cause.AGENT_FAILED
    over = decisions.cut_short("", True, 120, 100)
    assert over.cause == Cause.TOKEN_CAP and "120 > 100" in over.reason


def test_a_stop_cancels_interrupts_retries_once_or_lets_judging_resume() -> None:
    assert decisions.stopped("cancelled", "judging", "manual").outcome == "cancelled"
    assert decisions.stopped("interrupted", "judging", "manual") is None
    first = decisions.stopped("interrupted", "running", "manual")
    assert first == ("interrupted", decisions.INTERRUPTED_REASON, Cause.INTERRUPTED)
    assert decisions.retried(first)
    again = decisions.stopped("interrupted", "running", "retry")
    assert again.cause == Cause.INTERRUPTED_RETRY and not decisions.retried(again)


def test_success_says_whether_a_model_judged() -> None:
    assert decisions.success_reason(attempt(2)) == (
        "checks pass on attempt 2 (not judged by a model)"
    )
    judged = attempt(1, judged=True, score=8)
    assert decisions.success_reason(judged) == "checks pass and score 8 on attempt 1"


def test_a_failing_step_ends_the_run_with_the_same_cause_on_both_engines() -> None:
    from temporalio.exceptions import ApplicationError

    from daemon.engine.temporal.runflow import _failed
    from daemon.engine.temporal.workerside import failure
    from daemon.git.safe import GitError, GitTimeout
    from daemon.git.tree import TreeError
    from daemon.runparts.confinement import SandboxUnavailable

    cases = [
        (TreeError("no repository at /x"), Cause.SETUP_FAILED),
        (SandboxUnavailable("bubblewrap cannot start"), Cause.SANDBOX_UNAVAILABLE),
        (GitError(["push"], 1, "rejected"), Cause.GIT_FAILED),
        (GitTimeout(["fetch"], 30), Cause.GIT_FAILED),  # a GitError, by its class
        (ValueError("bad value"), Cause.LOOPD_ERROR),
    ]
    for exc, cause in cases:
        local = decisions.failed(exc)
        sent = failure(exc)  # what a worker's step raises
        on_temporal = _failed(ApplicationError(sent.message, type=sent.type))
        assert local.cause == on_temporal.cause == cause, exc
        assert local.reason == on_temporal.reason and str(exc)[:20] in local.reason, exc


def test_learning_follows_every_judged_attempt_and_a_post_mortem_all_but_a_first_try_pass() -> None:
    assert decisions.learns(experiment=False) and not decisions.learns(experiment=True)
    assert decisions.post_mortem_after(passed=False, n=1)
    assert decisions.post_mortem_after(passed=True, n=2)
    assert not decisions.post_mortem_after(passed=True, n=1)


def test_an_attempt_that_changed_the_persons_repository_ends_the_run_at_once() -> None:
    moved = attempt(1, violations=[Violation(kind="ref_moved", target="refs/heads/main")])
    assert decisions.repository_changed(moved).cause == Cause.REF_VIOLATION
    hook = attempt(2, violations=[Violation(kind="repo_hook", target="pre-commit")])
    ending = decisions.repository_changed(hook)
    assert ending.cause == Cause.REPO_VIOLATION and ending.reason.startswith("attempt 2: ")
    protected = attempt(1, violations=[Violation(kind="protected", target="t")])
    assert decisions.repository_changed(protected) is None
