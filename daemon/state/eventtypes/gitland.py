"""The fields of the events of the agent's work taken (guards, loopd's git) and of landing."""

from __future__ import annotations

from typing import Any

from daemon.state.eventtypes.base import CommandResult, EventFields, described, fields_of
from daemon.state.eventtypes.names import Event

# The agent's work taken -----------------------------------------------------------------


@fields_of(Event.VIOLATIONS_FOUND)
class ViolationsFound(EventFields):
    """The guards found what the attempt may not do: protected paths, refs, the repository."""

    violations: list[dict[str, Any]]


@fields_of(Event.REF_MOVED)
class RefMoved(EventFields):
    """A ref of the user's repository moved during the attempt."""

    ref: str
    was: str
    to: str


@fields_of(Event.REPO_RESTORED)
class RepoRestored(EventFields):
    """Files the attempt changed in the user's repository config, hooks or info were put back."""

    files: list[str]
    repo: str


@fields_of(Event.STALE_LOCK_REMOVED)
class StaleLockRemoved(EventFields):
    """A git lock file no process held was removed from the run's tree."""

    path: str


@fields_of(Event.AGENT_GIT_IGNORED)
class AgentGitIgnored(EventFields):
    """The agent's git was unreadable or unsafe: loopd took the tree's files alone."""

    problem: str


@fields_of(Event.INDEX_FLAGS_CLEARED)
class IndexFlagsCleared(EventFields):
    """Index flags that would hide files from loopd's commit were cleared."""

    paths: list[str] = described("the first 50")
    count: int


@fields_of(Event.AGENT_COMMITS_KEPT)
class AgentCommitsKept(EventFields):
    """The agent's own commits were kept under a ref of their own."""

    commit: str
    ref: str


@fields_of(Event.TOO_LARGE)
class TooLarge(EventFields):
    """Files over `max_file_size` were kept out of the repository."""

    files: list[dict[str, Any]]


@fields_of(Event.DETACHED_HEAD_TAKEN)
class DetachedHeadTaken(EventFields):
    """The agent left HEAD off the run's branch; loopd took its commit."""

    commit: str
    head: str


# Landing and branches -------------------------------------------------------------------


@fields_of(Event.LANDING_BLOCKED)
class LandingBlocked(EventFields):
    """A succeeded run's work could not land."""

    land: str
    target: str
    reason: str


@fields_of(Event.LANDED)
class Landed(EventFields):
    """A succeeded run's work is on its target (`land`: merge, push, by hand, or `already`)."""

    land: str
    target: str
    commit: str


@fields_of(Event.LAND_REQUESTED)
class LandRequested(EventFields):
    """`loopd land`: a person asked to land a succeeded run (`landed` or `landing_blocked` next)."""

    target: str
    by: str = described("who asked: `web` for the console; absent for the command line", "")


@fields_of(Event.LANDING_TRIGGERED)
class LandingTriggered(EventFields):
    """Landing moved a branch another loop watches: that loop was triggered."""

    triggered: str
    target: str


@fields_of(Event.LANDED_WITH)
class LandedWith(EventFields):
    """Another run's work landed with this one (it was built on it)."""

    landed_run: str
    commit: str


@fields_of(Event.PUSHED)
class Pushed(EventFields):
    """The run's branch was pushed (`land = "push"`)."""

    remote: str
    branch: str
    commit: str
    found: bool = described("the remote had it already (a push before a crash)", False)


@fields_of(Event.PR_COMMAND_RAN)
class PrCommandRan(EventFields):
    """`pr_command` ran after the push."""

    command: str


@fields_of(Event.PUSH_STARTED)
class PushStarted(EventFields):
    """A landing push began (its process group, reaped after a crash)."""

    pid: int


@fields_of(Event.PUSH_REAPED)
class PushReaped(EventFields):
    """A landing push a dead loopd left running was ended (or left: no longer that process)."""

    pid: int
    left: str = described("why nothing was signalled: the pid is gone or names another process", "")


@fields_of(Event.LANDING_QUEUED)
class LandingQueued(EventFields):
    """The run entered its target's landing queue; `ahead`: the runs queued before it."""

    target: str
    ahead: list[str]


@fields_of(Event.CONFLICT_ATTEMPT)
class ConflictAttempt(EventFields):
    """A landing's textual conflict went to the run's agent: its one conflict attempt."""

    attempt: int
    target: str
    target_commit: str = described("the target's commit the run's branch conflicts with")
    files: list[str]
    theirs: list[str] = described("the target's commits that changed the files, with runs", [])


@fields_of(Event.CONFLICT_RESOLVED)
class ConflictResolved(EventFields):
    """The agent resolved the conflict and its attempt passed: the merge is the run's branch."""

    attempt: int
    commit: str = described("the merge commit, parents the run's branch and the target's")


@fields_of(Event.CONFLICT_UNRESOLVED)
class ConflictUnresolved(EventFields):
    """The conflict attempt did not resolve the conflict: it goes to the person."""

    attempt: int
    reason: str


@fields_of(Event.CONFLICT_KEPT)
class ConflictKept(EventFields):
    """A conflict in a protected or guarded path: never given to an agent."""

    paths: list[str]
    reason: str


@fields_of(Event.LANDING_MERGE)
class LandingMerge(EventFields):
    """The run's branch was merged onto its target in a fresh tree."""

    target: str
    tree: str
    target_commit: str


@fields_of(Event.LANDING_VERIFY)
class LandingVerify(EventFields):
    """The merge's commit is checked before it lands."""

    commit: str
    tree: str


@fields_of(Event.LANDING_CHECKS)
class LandingChecks(EventFields):
    """`setup` and the checks on the commit that would land."""

    passed: bool
    results: list[CommandResult]


@fields_of(Event.BRANCH_DELETED)
class BranchDeleted(EventFields):
    """A run's branch was deleted: it changed nothing, it landed, or it expired."""

    branch: str
    why: str


@fields_of(Event.BRANCH_DELETE_FAILED)
class BranchDeleteFailed(EventFields):
    """A run's branch could not be deleted."""

    branch: str
    error: str


@fields_of(Event.BRANCH_FETCH_FAILED)
class BranchFetchFailed(EventFields):
    """The home could not fetch a run's branch from its worker."""

    branch: str
    error: str
