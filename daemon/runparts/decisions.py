"""What comes next in a run, decided from its record alone: pure functions both engines call.

The local executor and the Temporal run workflow ask the same questions (did the attempt end
the run, why did the run give up, what does a stop mean), so they get the same answers here.
Nothing in this module reads a file, a clock or the environment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple

from daemon.state.records import (
    FAILING_KINDS,
    REPOSITORY_KINDS,
    WHOLE_TREE,
    AttemptRecord,
    Cause,
    Outcome,
    Phase,
    RunRecord,
    violation_cause,
)

StopWhy = Literal["cancelled", "interrupted"]
# The `[limits]` key of each run limit an attempt can run into (AttemptRecord.limit_hit).
LIMIT_KEYS = {
    "processes": "max_processes",
    "memory": "max_memory",
    "tree": "max_tree",
    "tmp": "max_tmp",
}


class Ending(NamedTuple):
    """How a run ends: its outcome, the reason in a few words, and the cause."""

    outcome: Outcome
    reason: str
    cause: Cause


# The cause a step that raised ends the run with, by the exception's class name: a worker's
# failure crosses the engine as that name, so both engines read this one table.
FAILURE_CAUSES: dict[str, Cause] = {
    "SetupFailed": Cause.SETUP_FAILED,  # a worker's `setup` (the local engine ends that itself)
    "TreeError": Cause.SETUP_FAILED,
    "SandboxUnavailable": Cause.SANDBOX_UNAVAILABLE,
    "GitError": Cause.GIT_FAILED,
    "GitTimeout": Cause.GIT_FAILED,  # a GitError; named for a home step's failure, sent by name
}
OTHER_FAILURE = "LoopdError"


def failure_kind(exc: BaseException) -> str:
    """The table's name for the exception's class or its nearest base; else OTHER_FAILURE."""
    for cls in type(exc).__mro__:
        if cls.__name__ in FAILURE_CAUSES:
            return cls.__name__
    return OTHER_FAILURE


def failure_message(exc: BaseException) -> str:
    """What the exception says; an unexpected one says its class too, never a repr."""
    if isinstance(exc, OSError) and exc.filename is not None and failure_kind(exc) == OTHER_FAILURE:
        what = exc.strerror or type(exc).__name__
        return (
            f"{what}: {exc.filename}: a file or folder loopd needs is gone or unreadable; if it "
            "is the loop's repository or the worktrees folder, put it back or fix the path in "
            "the loop file or loopd.toml (`loopd check` says what is wrong), then retry the run"
        )
    if failure_kind(exc) == OTHER_FAILURE:
        return f"{type(exc).__name__}: {exc}"
    return str(exc)


def failure_ending(kind: str, message: str) -> Ending:
    """How a run ends on a step that raised `kind` (a table name, or a class name)."""
    cause = FAILURE_CAUSES.get(kind, Cause.LOOPD_ERROR)
    if cause == Cause.GIT_FAILED:
        return Ending("error", f"git failed: {message[:300]}", cause)
    if cause != Cause.LOOPD_ERROR:
        return Ending("error", message[:1000], cause)
    if kind and kind != OTHER_FAILURE and not message.startswith(f"{kind}: "):
        message = f"{kind}: {message}"
    return Ending("error", message[:400], cause)


def failed(exc: BaseException) -> Ending:
    """How a run ends on a step that raised `exc`."""
    return failure_ending(failure_kind(exc), failure_message(exc))


def records_target(isolation: str) -> bool:
    """Whether a run fixes its landing target at its start (a run in place has no branch)."""
    return isolation != "in-place"


def retry_base(run: RunRecord, earlier: RunRecord | None) -> str:
    """The ref a retry starts from: the earlier run's branch; "" when there is none to build on."""
    if run.trigger.kind != "retry" or earlier is None or earlier.id != run.trigger.retry_of:
        return ""
    if earlier.isolation == "in-place" or not earlier.branch:
        return ""  # an in-place run's branch is the person's own, not its work
    return f"refs/heads/{earlier.branch}"


def builds_on_last_success(build_on: str, isolation: str) -> bool:
    """Whether the run looks for the loop's last succeeded, not landed run to start from."""
    return build_on == "last-success" and isolation != "in-place"


def refused_by_rule(refuse: str, escalate: str) -> Ending | None:
    """The ending a `refuse` or `escalate` rule chosen for the run gives it before any agent."""
    if refuse:
        return Ending("refused", f"refused by rule {refuse}", Cause.REFUSED)
    if escalate:
        return Ending("escalated", f"rule {escalate} asks for a person first", Cause.RULE_ESCALATE)
    return None


def repository_changed(attempt: AttemptRecord) -> Ending | None:
    """A judged attempt whose agent changed the person's repository outside its tree: the run
    ends at once and a person looks. None when it did not."""
    in_repo = [v for v in attempt.violations if v.kind in REPOSITORY_KINDS]
    if not in_repo:
        return None
    cause = Cause.REF_VIOLATION if in_repo[0].kind == "ref_moved" else Cause.REPO_VIOLATION
    return Ending("escalated", f"attempt {attempt.n}: {in_repo[0].text()}", cause)


def learns(experiment: bool) -> bool:
    """Whether a judged attempt, passed or not, goes through learning (an experiment's never)."""
    return not experiment


def post_mortem_after(passed: bool, n: int) -> bool:
    """Whether learning asks for a post-mortem: after a failure, or a pass that followed one
    (a first-try pass teaches nothing new)."""
    return not passed or n > 1


def success_reason(attempt: AttemptRecord) -> str:
    """The reason of a run whose attempt passed."""
    if not attempt.judged:
        return f"checks pass on attempt {attempt.n} (not judged by a model)"
    return f"checks pass and score {attempt.score} on attempt {attempt.n}"


def cut_short(
    start_error: str,
    over_budget: bool,
    tokens: int,
    max_tokens: int,
    quota_exceeded: str = "",
    login_refused: str = "",
    gave_up: str = "",
    environment: str = "",
) -> Ending | None:
    """An attempt that ends the run before judging: its usage limit lasts past `max_wait`, its
    provider refused the agent's login, the agent did not start (or failed before its stream
    began), a check failed as on the base for the environment's sake (`environment`: the
    reason), it gave up again after its one nudge (`gave_up`: how, and its words), or the
    budget is spent. None when the attempt goes on to be judged."""
    if quota_exceeded:
        return Ending("escalated", quota_exceeded, Cause.QUOTA_WAIT_EXCEEDED)
    if login_refused:
        words = " ".join(login_refused.split())
        reason = f"the agent's provider refused its login: {words}"[:300]
        return Ending("escalated", reason, Cause.AGENT_LOGIN)
    if start_error:
        reason = f"agent failed to start: {start_error}"[:300]
        return Ending("escalated", reason, Cause.AGENT_FAILED)
    if environment:
        return Ending("escalated", environment[:1000], Cause.ENVIRONMENT)
    if gave_up:
        reason = f"the agent gave up ({' '.join(gave_up.split())})"
        return Ending("escalated", reason[:400], Cause.AGENT_GAVE_UP)
    if over_budget:
        return Ending(
            "escalated", f"token budget exceeded: {tokens} > {max_tokens}", Cause.TOKEN_CAP
        )
    return None


def given_up(attempts: Sequence[AttemptRecord], critic_threshold: int) -> Ending:
    """The ending of a run whose attempts are used up."""
    last = attempts[-1] if attempts else None
    if last is None:
        return Ending("escalated", "attempts used up", Cause.LOOPD_ERROR)
    if not last.checks_passed:
        return _failing_given_up(attempts, last)
    if last.violations:
        first = last.violations[0]
        return Ending("escalated", f"attempts used up; {first.text()}", violation_cause(first.kind))
    return Ending(
        "escalated",
        f"attempts used up; last score {last.score} below {critic_threshold}",
        Cause.CRITIC_REJECTED,
    )


def missing_programs(results: Sequence[tuple[str, int | None]]) -> list[str]:
    """The check commands (command, exit code) whose shell could not run a program."""
    return [command for command, code in results if code in (126, 127)]


# Stalls that are the agent's own (not a stop from outside).
AGENT_STALLS = ("silence", "repeated_tool_call")


def _failing_given_up(attempts: Sequence[AttemptRecord], last: AttemptRecord) -> Ending:
    """Attempts used up with the checks failing: the headline names the first cause a person
    must act on: a protected path, a stalled agent, timeouts, a missing program, the checks."""
    n = len(attempts)
    fails = f"checks still fail after {n} attempt{'s' if n != 1 else ''}"
    protected = [v for v in last.violations if v.kind == "protected"]
    if protected:
        return Ending(
            "escalated",
            f"attempts used up; {protected[0].text()}; {fails}",
            Cause.PROTECT_VIOLATION,
        )
    # A tree kept out for max_tree is the tree limit the attempt ran into: said as such below.
    failing = [
        v
        for v in last.violations
        if v.kind in FAILING_KINDS and not (last.limit_hit == "tree" and v.target == WHOLE_TREE)
    ]
    if failing:
        return Ending(
            "escalated", f"attempts used up; {failing[0].text()}", violation_cause(failing[0].kind)
        )
    stalls = [s for a in attempts for s in a.stalls if s.kind in AGENT_STALLS]
    if stalls:
        kind = stalls[-1].kind.replace("_", " ")
        detail = f" ({stalls[-1].detail})" if stalls[-1].detail else ""
        times = f"{len(stalls)} time{'s' if len(stalls) != 1 else ''}"
        why = f"attempts used up; the agent was stopped {times} for {kind}{detail}; {fails}"
        return Ending("escalated", why, Cause.STALLED)
    limited = [a for a in attempts if a.limit_hit]
    if limited:
        key = LIMIT_KEYS.get(limited[-1].limit_hit, "max_memory")
        why = (
            f"attempts used up; attempt {limited[-1].n} ran into the {limited[-1].limit_hit} "
            f"limit ([limits] {key}); {fails}"
        )
        return Ending("escalated", why, Cause.RESOURCE_LIMIT)
    if all(a.timed_out for a in attempts):
        return Ending("escalated", f"attempts used up; {fails}, each cut at attempt_timeout",
                      Cause.TIMEOUTS)  # fmt: skip
    if last.checks_missing:
        why = f"attempts used up; the check `{last.checks_missing[0][:120]}` exited 127 or " \
              "126: a program it runs is missing or not executable (see checks.log; " \
              f"`loopd check` names programs not on the PATH); {fails}"  # fmt: skip
        return Ending("escalated", why, Cause.CHECKS_FAILED)
    if last.exit_code in (126, 127):
        why = f"attempts used up; the agent exited {last.exit_code}: a program it runs is " \
              f"missing or not executable; {fails}"  # fmt: skip
        return Ending("escalated", why, Cause.AGENT_FAILED)
    return Ending("escalated", f"attempts used up; {fails}", Cause.CHECKS_FAILED)


# Why an interrupted run ended: whichever loopd process ran its attempt stopped meanwhile.
INTERRUPTED_REASON = "loopd stopped during the run (a stop, a crash, a kill or a lost worker)"

# The phases whose agent was done: a resumed run judges its last attempt (again).
AGENT_DONE: frozenset[Phase] = frozenset({"judging", "learning"})
# A run stopped (SIGTERM, a lost worker) in one of these phases is left live, not ended, and
# resumes after the restart: its agent's work is done, or it is parked on a usage limit.
# `learning` was missing here while a crash there resumed: the same moment gave an interrupted
# run (and a retry from scratch) after a stop, and a resumed one after a crash.
RESUMABLE_AFTER_STOP: frozenset[Phase] = AGENT_DONE | {"waiting"}
# The same phases after a crash: a stop and a crash at one moment leave one record, and the
# next start decides alike. The record must also hold what resuming needs (`resumable`).
RESUMABLE_AFTER_CRASH: frozenset[Phase] = RESUMABLE_AFTER_STOP


def stopped(why: StopWhy, phase: Phase, trigger_kind: str) -> Ending | None:
    """A run stopped from outside: cancelled by a person, or interrupted (a stop, a crash, a
    worker gone). None: the run was judging or learning, or parked on a usage limit, and
    resumes where it stopped.

    An interrupted run is retried once; a retry that is interrupted again goes to a person.
    """
    if why == "cancelled":
        return Ending("cancelled", "cancelled by a person", Cause.CANCELLED)
    if phase in RESUMABLE_AFTER_STOP:
        return None
    return interrupted(trigger_kind)


def interrupted(trigger_kind: str) -> Ending:
    """A run interrupted where it cannot resume: retried once; a retry interrupted again goes
    to a person."""
    cause = Cause.INTERRUPTED_RETRY if trigger_kind == "retry" else Cause.INTERRUPTED
    return Ending("interrupted", INTERRUPTED_REASON, cause)


def left_live(run: RunRecord) -> Ending | None:
    """How a run that a stopped or crashed loopd left without an outcome ends, when the next
    one starts. None: it resumes (its agent was done and it was judging, or it was parked)."""
    if run.phase in RESUMABLE_AFTER_CRASH and resumable(run):
        return None
    return stopped("interrupted", "running", run.trigger.kind)


def resumable(run: RunRecord) -> bool:
    """Whether the record holds what resuming needs: the last attempt finished (judging,
    learning), or the park (waiting)."""
    if run.phase in AGENT_DONE:
        return bool(run.attempts) and run.attempts[-1].finished is not None
    return run.phase == "waiting" and run.park is not None and bool(run.attempts)


def retried(ending: Ending) -> bool:
    """Whether a run that ended so gets a `retry` run (an interrupted first run does)."""
    return ending.outcome == "interrupted" and ending.cause == Cause.INTERRUPTED
