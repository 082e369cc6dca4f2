"""The fields of a run's events: its life, its attempts, their judging."""

from __future__ import annotations

from typing import Any, Literal

from daemon.state.eventtypes.base import CommandResult, EventFields, described, fields_of
from daemon.state.eventtypes.names import Event
from daemon.state.records import Outcome, TriggerKind

# Where a run a stopped loopd left resumes: its last attempt judged again, or its park.
Resumed = Literal["judging", "waiting"]

# A run's life ---------------------------------------------------------------------------


@fields_of(Event.RUN_STARTED)
class RunStarted(EventFields):
    """A run began, on either engine."""

    trigger: TriggerKind
    reason: str


@fields_of(Event.RUN_RESUMED)
class RunResumed(EventFields):
    """A run a stopped loopd left live goes on: its last attempt judged again, or its park."""

    phase: Resumed
    attempt: int


@fields_of(Event.RUN_RECOVERED)
class RunRecovered(EventFields):
    """A starting daemon found the run live and resumes it."""

    to: Resumed


@fields_of(Event.RUN_RECOVERY_FAILED)
class RunRecoveryFailed(EventFields):
    """A run left live could not be recovered; it is ended as well as it can be."""

    error: str


@fields_of(Event.RUN_ERROR)
class RunError(EventFields):
    """A step of the run raised: the run ends `error`."""

    error: str


@fields_of(Event.RUN_FINISHED)
class RunFinished(EventFields):
    """A run ended with an outcome (or a queued one was cancelled)."""

    outcome: Outcome
    reason: str
    cause: str = ""
    tokens: int = 0


@fields_of(Event.CANCEL_REQUESTED)
class CancelRequested(EventFields):
    """`loopd cancel`: a person asked a queued or running run to stop (`run_finished` follows)."""

    by: str = described("who asked: `web` for the console; absent for the command line", "")


@fields_of(Event.FINISH_FAILED)
class FinishFailed(EventFields):
    """Finishing a run raised; the next start completes it."""

    error: str


@fields_of(Event.TREE_UNUSABLE)
class TreeUnusable(EventFields):
    """The run's tree could not be opened while finishing it."""

    error: str


@fields_of(Event.RUN_PRUNED)
class RunPruned(EventFields):
    """`retain_days` removed an old run's folders (and its branch)."""

    removed: list[str]
    branch: str = described("the branch deleted with it, or empty")
    retain_days: int
    folded: bool = described(
        "its folder went whole, its record kept as a line of state/pruned-runs.jsonl", False
    )


@fields_of(Event.SANDBOX)
class Sandbox(EventFields):
    """The sandbox the run's processes get here."""

    mode: str = described("[sandbox] mode")
    in_force: str = described("the sandbox chosen")
    warning: str = ""


@fields_of(Event.SETUP_STARTED)
class SetupStarted(EventFields):
    """The loop's `setup` commands began in the run's tree."""

    commands: int
    log: str


@fields_of(Event.SETUP_FINISHED)
class SetupFinished(EventFields):
    """`setup` ended."""

    passed: bool
    log: str = ""
    made: list[str] = described("paths setup made (the first 50)", [])
    results: list[CommandResult] = []
    worker: str = ""


@fields_of(Event.DONE_CHECK)
class DoneCheck(EventFields):
    """`skip_if_done`: the `done_when` checks on the run's base before any attempt."""

    passed: bool
    commit: str
    results: list[CommandResult] = []
    worker: str = ""


@fields_of(Event.BUILD_ON)
class BuildOn(EventFields):
    """The run starts on another run's branch (`build_on`)."""

    run_built_on: str
    base: str


@fields_of(Event.BASE_TESTS)
class BaseTests(EventFields):
    """What the checks' test runners counted on the run's base."""

    counts: list[dict[str, Any]]


# Attempts -------------------------------------------------------------------------------


@fields_of(Event.ATTEMPT_STARTED)
class AttemptStarted(EventFields):
    """The agent was started for an attempt."""

    attempt: int


@fields_of(Event.ATTEMPT_FINISHED)
class AttemptFinished(EventFields):
    """The attempt's agent ended."""

    attempt: int
    exit_code: int | None
    nudges: int
    timed_out: bool
    interrupted: bool = described("the attempt ended with the run (cancel, stop, crash)", False)
    stalls: int = 0
    worker: str = ""


@fields_of(Event.ATTEMPT_REAPED)
class AttemptReaped(EventFields):
    """A restarted worker ended an attempt its previous process left running."""

    worker: str


@fields_of(Event.STALL)
class Stall(EventFields):
    """The agent was stopped: silence, a repeated tool call, a timeout."""

    attempt: int
    kind: str
    detail: str


@fields_of(Event.NUDGE)
class Nudge(EventFields):
    """The agent was nudged to go on."""

    attempt: int
    n: int = described("nudges so far in the attempt")
    kind: str


@fields_of(Event.RESOURCE_LIMIT)
class ResourceLimit(EventFields):
    """The agent ran into a run limit: processes, memory, tree."""

    attempt: int
    limit: str


@fields_of(Event.LOGIN_HELD)
class LoginHeld(EventFields):
    """The agent's provider refused its login: new runs of every loop using its profile wait
    until `loopd check` finds the login working."""

    profile: str


@fields_of(Event.QUOTA_WAIT)
class QuotaWait(EventFields):
    """The run parks on its agent's usage limit until `resume_at`."""

    attempt: int
    profile: str
    message: str
    resume_at: str
    reset_named: bool
    count: int = described("parks in a row")
    worker: str = ""


@fields_of(Event.QUOTA_RESUMED)
class QuotaResumed(EventFields):
    """A parked run's attempt goes on."""

    attempt: int
    waited_seconds: int


@fields_of(Event.COMMIT_FAILED)
class CommitFailed(EventFields):
    """loopd could not commit what the attempt left."""

    attempt: int
    error: str


@fields_of(Event.CREDENTIALS_RETURNED)
class CredentialsReturned(EventFields):
    """Login files the agent refreshed were copied back to the real HOME."""

    paths: list[str]


@fields_of(Event.CREDENTIALS_NOT_RETURNED)
class CredentialsNotReturned(EventFields):
    """Refreshed login files could not be copied back."""

    error: str


@fields_of(Event.WORKTREE_REMOVE_FAILED)
class WorktreeRemoveFailed(EventFields):
    """The run's tree could not be removed."""

    error: str


# Judging --------------------------------------------------------------------------------


@fields_of(Event.CHECKS)
class Checks(EventFields):
    """The `done_when` checks ran on an attempt's commit."""

    attempt: int
    passed: bool
    results: list[CommandResult]


@fields_of(Event.CHECKS_WEAKENED_ALLOWED)
class ChecksWeakenedAllowed(EventFields):
    """The checks test less than on the base, and that is allowed here."""

    command: str
    why: str


@fields_of(Event.VIOLATIONS)
class Violations(EventFields):
    """What the attempt may not do and did, as judged."""

    attempt: int
    violations: list[dict[str, Any]]


@fields_of(Event.VERDICT)
class Verdict(EventFields):
    """The attempt's verdict: checks and, with a critic, its score."""

    attempt: int
    passed: bool
    score: int | None
    judged: bool = described("a model scored it")
    verdict: str
    rules_followed: list[str] = []
    rules_irrelevant: list[str] = []


@fields_of(Event.VERIFIER_UNAVAILABLE)
class VerifierUnavailable(EventFields):
    """The critic's model did not answer while judging."""

    attempt: int
    error: str
    waited_seconds: int


@fields_of(Event.PROTECTED_RESTORED)
class ProtectedRestored(EventFields):
    """Protected paths the attempt changed were put back for the next attempt."""

    paths: list[str]
