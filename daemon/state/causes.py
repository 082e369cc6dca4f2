"""Why a run ended the way it did: the `Cause` vocabulary of `run.toml`, and the cause of each
kind of violation. Re-exported by records.py, where the run's record uses it."""

from __future__ import annotations

from enum import StrEnum


class Cause(StrEnum):
    """Why a run ended the way it did, in `run.toml` as `cause`; the escalation's next step
    follows from it."""

    CHECKS_FAILED = "checks-failed"
    CRITIC_REJECTED = "critic-rejected"
    PROTECT_VIOLATION = "protect-violation"
    REF_VIOLATION = "ref-violation"
    REPO_VIOLATION = "repo-violation"  # the user's repository config, hooks or info changed
    GIT_VIOLATION = "git-violation"  # HEAD's commits off the base, or the tree's .git replaced
    TIMEOUTS = "timeouts"  # every attempt hit attempt_timeout
    STALLED = "stalled"  # the agent was stopped for silence or a repeated tool call
    TOKEN_CAP = "token-cap"
    VERIFIER_UNAVAILABLE = "verifier-unavailable"
    AGENT_FAILED = "agent-failed"  # the agent could not be started, or failed before its stream
    AGENT_LOGIN = "agent-login"  # the agent's provider refused its credentials (401/403)
    SETUP_FAILED = "setup-failed"  # the run's tree could not be made
    GIT_FAILED = "git-failed"  # a git command on the run's tree failed or hung
    REFUSED = "refused"
    RULE_ESCALATE = "rule-escalate"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    INTERRUPTED_RETRY = "interrupted-retry"  # the retry of an interrupted run was interrupted
    QUOTA_WAIT_EXCEEDED = "quota-wait-exceeded"  # a usage limit outlasted [limits] max_wait
    LOOPD_ERROR = "loopd-error"
    PASSED = "passed"
    SANDBOX_UNAVAILABLE = "sandbox-unavailable"  # [sandbox] says runs must not go unconfined
    ALREADY_DONE = "already-done"  # skipped: done_when passed where the run would start
    LANDING_BLOCKED = "landing-blocked"  # succeeded, but its work could not land
    # Succeeded, but setup or the checks fail on the commit that would land: escalated.
    LANDING_CHECKS_FAILED = "landing-checks-failed"
    # Succeeded, but its branch conflicts with what landed on the target since: escalated.
    LANDING_CONFLICT = "landing-conflict"
    # Succeeded, but the target moved under each of its landing's tries: escalated.
    LANDING_MOVING = "landing-moving"
    TOO_LARGE = "too-large"  # a file over [limits] max_file_size: kept out of the repository
    RESOURCE_LIMIT = "resource-limit"  # the agent ran into [limits] max_processes or max_memory
    CHECK_CHANGED_TREE = "check-changed-tree"  # a check changed files the commit holds
    CHECKS_WEAKENED = "checks-weakened"  # fewer tests passed, more skipped, or none ran
    LINK_OUT_OF_TREE = "link-out-of-tree"  # the commit links out of the check tree
    # A check cannot run here (a program or module not found), on the base or failing the
    # same environmental way after the agent's edits (runs/sameoutput.py).
    ENVIRONMENT = "environment"
    # The agent exited non-zero or said it cannot go on, with the checks failing, after its
    # one nudge (or with none left): its words are the reason (agents/endings.py).
    AGENT_GAVE_UP = "agent-gave-up"
    # No run's: the home's one escalation of a spell of a full state/ (service/floor.py).
    STATE_FULL = "state-full"
    # A new member here, its next step in people/next_steps.py.


def violation_cause(kind: str) -> Cause:
    """The cause of a run given up on (or ended) for a violation of this kind."""
    if kind == "protected":
        return Cause.PROTECT_VIOLATION
    if kind == "ref_moved":
        return Cause.REF_VIOLATION
    if kind in ("repo_config", "repo_hook", "repo_info"):
        return Cause.REPO_VIOLATION
    if kind == "check_changed_tree":
        return Cause.CHECK_CHANGED_TREE
    if kind == "checks_weakened":
        return Cause.CHECKS_WEAKENED
    if kind == "too_large":
        return Cause.TOO_LARGE
    if kind == "link_out_of_tree":
        return Cause.LINK_OUT_OF_TREE
    return Cause.GIT_VIOLATION
