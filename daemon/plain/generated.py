"""The plain path's tables of fields and vocabularies, generated from the models by
`python -m daemon.plain.tables` (daemon/plain/tables.py): do not edit by hand.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

# The value of a required field in a table: a file without it does not validate.
REQUIRED = "<required>"
# plain/escalations.py's: a front matter without it is skipped.
ESCALATION_REQUIRED: Any = object()
_TIME = (datetime, type(None))


def opt(kind: Any) -> tuple[str, Any]:
    """The kind `kind | None`."""
    return ("opt", kind)


def many(kind: Any) -> tuple[str, Any]:
    """The kind `list[kind]`."""
    return ("list", kind)


# The closed vocabularies: another value is refused by the models.
PHASES = (
    "idle",
    "queued",
    "preparing",
    "running",
    "judging",
    "learning",
    "paused",
    "waiting",
    "landing",
    "not-loaded",
)
OUTCOMES = ("succeeded", "escalated", "refused", "interrupted", "cancelled", "error", "skipped")
TRIGGER_KINDS = ("schedule", "push", "change", "manual", "catch-up", "retry", "experiment")
CAUSES = (
    "checks-failed",
    "critic-rejected",
    "protect-violation",
    "ref-violation",
    "repo-violation",
    "git-violation",
    "timeouts",
    "stalled",
    "token-cap",
    "verifier-unavailable",
    "agent-failed",
    "agent-login",
    "setup-failed",
    "git-failed",
    "refused",
    "rule-escalate",
    "cancelled",
    "interrupted",
    "interrupted-retry",
    "quota-wait-exceeded",
    "loopd-error",
    "passed",
    "sandbox-unavailable",
    "already-done",
    "landing-blocked",
    "landing-checks-failed",
    "landing-conflict",
    "landing-moving",
    "too-large",
    "resource-limit",
    "check-changed-tree",
    "checks-weakened",
    "link-out-of-tree",
    "environment",
    "agent-gave-up",
    "state-full",
)
VIOLATION_KINDS = (
    "protected",
    "ref_moved",
    "repo_config",
    "repo_hook",
    "repo_info",
    "detached_head",
    "git_dir",
    "check_changed_tree",
    "checks_weakened",
    "too_large",
    "link_out_of_tree",
)
ISOLATIONS = ("clone", "worktree", "in-place")

# The run files' tables (plain/runfile.py): field -> (kind, default), in model order.
Spec = dict[str, tuple[Any, Any]]
TRIGGER: Spec = {  # state.records.Trigger
    "loop": ("str", REQUIRED),
    "kind": (TRIGGER_KINDS, "manual"),
    "reason": ("str", ""),
    "ref": ("str", ""),
    "old": ("str", ""),
    "new": ("str", ""),
    "ts": ("datetime", REQUIRED),
    "paths": (many("str"), []),
    "note": ("str", ""),
    "retry_of": ("str", ""),
    "id": ("str", ""),
    "force": ("bool", False),
    "remote": ("str", ""),
    "not_before": (opt("datetime"), None),
}
RUN_OVERLAP: Spec = {  # state.records.RunOverlap
    "run": ("str", REQUIRED),
    "loop": ("str", REQUIRED),
    "step": ("str", "running"),
    "files": (many("str"), []),
}
RUN_TRIGGER: Spec = {  # state.records.RunTrigger
    "kind": (TRIGGER_KINDS, REQUIRED),
    "reason": ("str", ""),
    "ref": ("str", ""),
    "old": ("str", ""),
    "new": ("str", ""),
    "ts": (opt("datetime"), None),
    "note": ("str", ""),
    "retry_of": ("str", ""),
    "paths": (many("str"), []),
    "inbox": (many("str"), []),
    "merged": (many("table"), []),
    "merged_count": ("int", 0),
    "force": ("bool", False),
    "remote": ("str", ""),
    "not_before": (opt("datetime"), None),
    "overlaps": (many(RUN_OVERLAP), []),
}
STALL: Spec = {  # state.records.StallRecord
    "kind": ("str", REQUIRED),
    "at": ("datetime", REQUIRED),
    "detail": ("str", ""),
}
VIOLATION: Spec = {  # state.violations.Violation
    "kind": (VIOLATION_KINDS, REQUIRED),
    "target": ("str", REQUIRED),
    "detail": ("str", ""),
}
TEST_COUNTS: Spec = {  # state.records.TestCounts
    "runner": ("str", ""),
    "ran": ("int", 0),
    "passed": ("int", 0),
    "failed": ("int", 0),
    "skipped": ("int", 0),
    "deselected": ("int", 0),
    "executed": (many("str"), []),
    "not_run": (many("str"), []),
    "tampered": (many("str"), []),
    "unreadable": ("str", ""),
}
ATTEMPT: Spec = {  # state.records.AttemptRecord
    "n": ("int", REQUIRED),
    "started": ("datetime", REQUIRED),
    "finished": (opt("datetime"), None),
    "exit_code": (opt("int"), None),
    "nudges": ("int", 0),
    "stalls": (many(STALL), []),
    "checks_passed": (opt("bool"), None),
    "checks_missing": (many("str"), []),
    "score": (opt("int"), None),
    "verdict": ("str", ""),
    "feedback": ("str", ""),
    "judged": ("bool", False),
    "violations": (many(VIOLATION), []),
    "tokens": ("int", 0),
    "input_tokens": ("int", 0),
    "output_tokens": ("int", 0),
    "cost_usd": ("float", 0.0),
    "timed_out": ("bool", False),
    "summary": ("str", ""),
    "session_id": ("str", ""),
    "base_commit": ("str", ""),
    "head_commit": ("str", ""),
    "interrupted": ("bool", False),
    "limit_hit": ("str", ""),
    "conflict": ("str", ""),
    "rules": (many("str"), []),
    "rules_followed": (many("str"), []),
    "rules_irrelevant": (many("str"), []),
    "attributed": ("bool", False),
}
EXPERIMENT: Spec = {  # state.records.ExperimentArm
    "id": ("str", REQUIRED),
    "arm": ("str", REQUIRED),
    "without": (many("str"), []),
}
SEEDED: Spec = {  # state.records.SeededFile
    "path": ("str", REQUIRED),
    "sha256": ("str", REQUIRED),
    "copy_back": ("bool", False),
}
EXPOSURE: Spec = {  # state.records.RunExposure
    "git_writable": (many("str"), []),
    "git_readable": (many("str"), []),
    "read_only": (many("str"), []),
    "agent_home": ("str", ""),
    "real_home": ("str", ""),
    "seeded": (many(SEEDED), []),
}
PARK: Spec = {  # state.records.Park
    "profile": ("str", REQUIRED),
    "attempt": ("int", REQUIRED),
    "started": ("datetime", REQUIRED),
    "since": ("datetime", REQUIRED),
    "count": ("int", 1),
    "message": ("str", ""),
    "reset_named": ("bool", False),
    "session_id": ("str", ""),
    "used_seconds": ("float", 0.0),
    "asked_whole": ("bool", False),
    "notified": ("bool", False),
}
RUN: Spec = {  # state.records.RunRecord
    "id": ("str", REQUIRED),
    "loop": ("str", REQUIRED),
    "task": ("str", REQUIRED),
    "trigger": (RUN_TRIGGER, REQUIRED),
    "started": ("datetime", REQUIRED),
    "finished": (opt("datetime"), None),
    "outcome": (opt(OUTCOMES), None),
    "reason": ("str", ""),
    "cause": (opt(CAUSES), None),
    "branch": ("str", ""),
    "branch_deleted": ("str", ""),
    "tokens": ("int", 0),
    "input_tokens": ("int", 0),
    "output_tokens": ("int", 0),
    "cost_usd": ("float", 0.0),
    "rules_fired": (many("str"), []),
    "attempts": (many(ATTEMPT), []),
    "phase": (PHASES, "preparing"),
    "isolation": (ISOLATIONS, "worktree"),
    "repo": ("str", ""),
    "worktree": ("str", ""),
    "base_commit": ("str", ""),
    "own_git_dir": ("str", ""),
    "repo_git_dir": ("str", ""),
    "agent_git_dir": ("str", ""),
    "sandbox": ("str", ""),
    "refs_before": ("strings", {}),
    "refs_at": (opt("datetime"), None),
    "pid": ("int", 0),
    "agent_pids": (many("int"), []),
    "pid_marks": ("strings", {}),
    "judging_since": (opt("datetime"), None),
    "exposure": (opt(EXPOSURE), None),
    "resume_at": (opt("datetime"), None),
    "waited": ("int", 0),
    "park": (opt(PARK), None),
    "finish_done": (many("str"), []),
    "experiment": (opt(EXPERIMENT), None),
    "land": ("str", ""),
    "target": ("str", ""),
    "target_commit": ("str", ""),
    "built_on": (many("str"), []),
    "landed": ("bool", False),
    "landed_as": ("str", ""),
    "landed_how": ("str", ""),
    "landing": ("str", ""),
    "base_tests": (many(TEST_COUNTS), []),
    "base_failures": (many("str"), []),
    "verified_tree": ("str", ""),
    "push_pid": ("int", 0),
    "escalation": ("str", ""),
    "retry_not_run": ("str", ""),
}
PENDING: Spec = {  # state.queuefile.PendingRun
    "id": ("str", REQUIRED),
    "loop": ("str", REQUIRED),
    "trigger": (TRIGGER, REQUIRED),
    "queued_at": ("datetime", REQUIRED),
    "merged": (many(TRIGGER), []),
    "merged_count": ("int", 0),
}
QUEUE: Spec = {  # state.queuefile.QueueFile
    "pending": (many(PENDING), []),
    "taken": (many("str"), []),
}
PRUNED: Spec = {  # state.pruned.PrunedRun
    "run": ("str", REQUIRED),
    "loop": ("str", REQUIRED),
    "task": ("str", ""),
    "trigger": ("str", ""),
    "trigger_reason": ("str", ""),
    "started": (opt("datetime"), None),
    "finished": (opt("datetime"), None),
    "outcome": (opt("str"), None),
    "reason": ("str", ""),
    "attempts": ("int", 0),
    "tokens": ("int", 0),
    "branch": ("str", ""),
    "branch_deleted": ("bool", False),
    "landed": ("str", ""),
    "landed_as": ("str", ""),
    "pruned": ("datetime", REQUIRED),
    "retain_days": ("int", 0),
}

# plain/records.py: field -> (the types a value may have, default).
DAEMON_STATUS: dict[str, tuple[tuple[type, ...], Any]] = {  # state.records.DaemonStatus
    "pid": ((int,), 0),
    "version": ((str,), ""),
    "started": (_TIME, None),
    "heartbeat": (_TIME, None),
    "running": ((bool,), False),
    "warnings": ((list,), []),
    "sandbox": ((str,), ""),
    "engine": ((str,), ""),
}
LOOP_STATUS: dict[str, tuple[tuple[type, ...], Any]] = {  # state.records.LoopStatus
    "phase": ((str,), "idle"),
    "run": ((str,), ""),
    "attempt": ((int,), 0),
    "last_outcome": ((str,), ""),
    "last_run": ((str,), ""),
    "next_fire": (_TIME, None),
    "paused": ((bool,), False),
    "enabled": ((bool,), True),
    "error": ((str,), ""),
    "pending": ((int,), 0),
    "resume_at": (_TIME, None),
    "waiting_for": ((str,), ""),
    "loaded": ((bool,), True),
    "stale": ((bool,), False),
    "digest": ((str,), ""),
}
VERIFIER_STATUS: dict[str, tuple[tuple[type, ...], Any]] = {  # state.records.VerifierStatus
    "reachable": ((bool,), True),
    "since": (_TIME, None),
    "last_error": ((str,), ""),
}
BUDGET_STATUS: dict[str, tuple[tuple[type, ...], Any]] = {  # state.records.BudgetStatus
    "day": ((str,), ""),
    "tokens": ((int,), 0),
    "limit": ((int,), 0),
    "exhausted": ((bool,), False),
    "until": (_TIME, None),
}
STATE_USAGE: dict[str, tuple[tuple[type, ...], Any]] = {  # service.statecap.StateUsage
    "measured": ((datetime,), None),
    "total": ((int,), 0),
    "limit": ((int,), 0),
    "loops": ((dict,), {}),
}

# plain/escalations.py: field -> (kind, default), in the model's order.
ESCALATION: dict[str, tuple[Any, Any]] = {  # people.escalation_file.Escalation
    "run": ("str", ESCALATION_REQUIRED),
    "loop": ("str", ESCALATION_REQUIRED),
    "task": ("str", ESCALATION_REQUIRED),
    "status": (("open", "resolved", "superseded"), "open"),
    "escalated": ("datetime", ESCALATION_REQUIRED),
    "cause": ("str", "unknown"),
    "outcome": ("str", ""),
    "reason": ("str", ""),
    "branch": ("str", ""),
    "attempts": ("int", 0),
    "best_score": ("int", None),
    "resolved": ("datetime", None),
    "note": ("str", ""),
    "retry": ("bool", False),
    "retry_trigger": ("str", ""),
    "superseded_by": ("str", ""),
    "verdict": (("", "good", "bad"), ""),
    "count": ("int", 1),
    "latest_run": ("str", ""),
    "latest": ("datetime", None),
    "latest_cause": ("str", ""),
    "latest_reason": ("str", ""),
    "notified": ("datetime", None),
    "notified_count": ("int", 1),
    "profile": ("str", ""),
    "id": ("str", ""),
}
