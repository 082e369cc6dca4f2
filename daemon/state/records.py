"""Pydantic models of what loopd writes to `state/`: triggers, runs, attempts, status."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Re-exported: a run's record and its cause are read together.
from daemon.state.causes import Cause as Cause
from daemon.state.causes import violation_cause as violation_cause
from daemon.state.violations import CHECK_KINDS as CHECK_KINDS
from daemon.state.violations import FAILING_KINDS as FAILING_KINDS
from daemon.state.violations import REPOSITORY_KINDS as REPOSITORY_KINDS
from daemon.state.violations import WHOLE_TREE as WHOLE_TREE
from daemon.state.violations import Violation as Violation
from daemon.state.violations import ViolationKind as ViolationKind

TriggerKind = Literal["schedule", "push", "change", "manual", "catch-up", "retry", "experiment"]
Outcome = Literal[
    "succeeded", "escalated", "refused", "interrupted", "cancelled", "error", "skipped"
]
Phase = Literal[
    "idle",
    "queued",
    "preparing",
    "running",
    "judging",
    "learning",
    "paused",
    "waiting",
    "landing",
    "not-loaded",  # a loop's: its file does not load (status only; never a run's)
]
OUTCOMES: tuple[str, ...] = get_args(Outcome)


def make_run_id(loop: str, now: datetime, bump: int = 0) -> str:
    """`YYYYMMDDTHHMMSSZ-LOOP-xxxx`: xxxx is the fraction of the second, so ids sort by time.

    `bump` steps past an id already taken at the same instant.
    """
    utc = now.astimezone(UTC)
    tick = int(utc.microsecond * 65536 / 1_000_000) + bump
    if tick > 0xFFFF:
        tick = secrets.randbelow(0x10000)
    return f"{utc:%Y%m%dT%H%M%SZ}-{loop}-{tick:04x}"


class Record(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Trigger(Record):
    """Why a run starts; also the JSON of an inbox file."""

    loop: str
    kind: TriggerKind = "manual"
    reason: str = ""
    ref: str = ""
    old: str = ""
    new: str = ""
    ts: datetime
    paths: list[str] = []
    note: str = ""  # a person's note, carried by `escalations resolve --retry`
    retry_of: str = ""  # the run this one retries
    id: str = ""  # the inbox file's name, when it came through the inbox
    force: bool = False  # run even when done_when already passes (`--force`)
    remote: str = ""  # a push on this [remotes.NAME]: the loop's on_remote_push decides
    # A scheduled fire handed out ahead (scheduling/timer.py): the run is prepared now, its
    # agent starts at this moment.
    not_before: datetime | None = None

    def summary(self) -> dict[str, Any]:
        """What run.toml keeps of a merged trigger."""
        out: dict[str, Any] = {"kind": self.kind, "ts": self.ts}
        for key in ("reason", "ref", "old", "new", "remote"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.paths:
            out["paths"] = self.paths
        return out


class RunOverlap(Record):
    """Another run on the run's target, changing files the run's loop changed lately, when
    the run was queued (runs/overlapnote.py)."""

    run: str
    loop: str
    step: str = "running"  # running, or its landing queue's step: queued, landing, moving
    files: list[str] = []  # the files both touch (the first OVERLAP_FILES)


OVERLAP_FILES = 50


class RunTrigger(Record):
    """`[trigger]` of run.toml: the trigger that started the run and those merged into it."""

    kind: TriggerKind
    reason: str = ""
    ref: str = ""
    old: str = ""
    new: str = ""
    ts: datetime | None = None
    note: str = ""
    retry_of: str = ""
    paths: list[str] = []
    inbox: list[str] = []  # inbox file names of the trigger and the merged ones kept
    merged: list[dict[str, Any]] = []  # the last merged triggers (a burst keeps a few)
    merged_count: int = 0  # every trigger merged into the run
    force: bool = False  # it or a merged trigger asked to run even when already done
    remote: str = ""  # the [remotes.NAME] a push came from
    not_before: datetime | None = None  # a scheduled fire: its agent started at this moment
    overlaps: list[RunOverlap] = []  # runs on the same target changing the same files


# Outcomes that hand the run to a person; an interrupted retry does too (it is not retried).
ESCALATING_OUTCOMES: frozenset[Outcome] = frozenset({"escalated", "refused", "error"})
# The task is done: the run succeeded, or it was skipped because the checks already pass.
DONE_OUTCOMES: frozenset[Outcome] = frozenset({"succeeded", "skipped"})
# Ends from outside the attempt (a person, a stop, a failure): an open attempt is closed as is.
STOPPED_OUTCOMES: frozenset[Outcome] = frozenset({"cancelled", "interrupted", "error"})
# Ends that judged the agent's work: only these count for or against the rules that fired.
JUDGED_OUTCOMES: frozenset[Outcome] = frozenset({"succeeded", "escalated"})


def is_experiment(run: RunRecord) -> bool:
    """A run of `loopd experiment`: it never lands, escalates, notifies, teaches rules, updates
    rule counters, supersedes an escalation or is skipped; its tokens count like any run's."""
    return run.trigger.kind == "experiment"


def escalates(outcome: Outcome | None, cause: Cause | None) -> bool:
    """Whether a run that ended so gets an escalation file."""
    return outcome in ESCALATING_OUTCOMES or cause in (
        Cause.INTERRUPTED_RETRY,
        Cause.LANDING_CHECKS_FAILED,
        Cause.LANDING_CONFLICT,
        Cause.LANDING_MOVING,
    )


class TestCounts(Record):
    """What one check's test runner says it did."""

    __test__ = False  # not a pytest class

    runner: str = ""  # "": the check was not counted
    ran: int = 0
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    deselected: int = 0
    executed: list[str] = []  # ids that passed or failed, from a report (testreports.py)
    not_run: list[str] = []  # ids skipped or xfailed, from a report
    tampered: list[str] = []  # ids whose report does not match what loopd's witness saw
    unreadable: str = ""  # why a recognised runner's count could not be read (fails closed)

    def text(self) -> str:
        parts = [f"{self.passed} passed", f"{self.failed} failed", f"{self.skipped} skipped"]
        if self.deselected:
            parts.append(f"{self.deselected} deselected")
        return ", ".join(parts)


class FileChange(Record):
    """One file of an attempt's diff, as `git diff --numstat` counts it."""

    path: str
    added: int = 0
    removed: int = 0
    binary: bool = False
    status: str = "modified"  # modified | added | deleted | renamed

    def stat(self) -> str:
        if self.binary:
            return f"{self.path} (binary, {self.status})"
        extra = "" if self.status == "modified" else f", {self.status}"
        return f"{self.path} (+{self.added} -{self.removed}{extra})"


class DiffStat(Record):
    """`attempt-N/diffstat.json`: the attempt's changed files, counted when loopd committed."""

    files: list[FileChange] = []  # the first FILES_KEPT files
    total_files: int = 0
    added: int = 0
    removed: int = 0
    patch_bytes: int = 0  # the size of the whole patch, before any cap
    patch_capped: bool = False


class StallRecord(Record):
    kind: str
    at: datetime
    detail: str = ""


class AttemptRecord(Record):
    """One `[[attempts]]` entry of run.toml."""

    n: int
    started: datetime
    finished: datetime | None = None
    exit_code: int | None = None
    nudges: int = 0
    stalls: list[StallRecord] = []
    checks_passed: bool | None = None
    checks_missing: list[str] = []  # checks that exited 126 or 127: a program missing
    score: int | None = None
    verdict: str = ""
    feedback: str = ""
    judged: bool = False  # scored by the critic model
    violations: list[Violation] = []  # protected paths changed, refs moved
    tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0  # from the profile's `price`, else where the agent reports it
    timed_out: bool = False
    summary: str = ""  # the agent's final text, kept for the critic
    session_id: str = ""
    base_commit: str = ""  # the tree's commit when the attempt started
    head_commit: str = ""  # loopd's commit of what the agent left
    interrupted: bool = False  # the attempt ended with the run (cancel, stop, crash)
    limit_hit: str = ""  # a run limit the agent ran into: processes, memory, tree (its size)
    # A landing's conflict attempt: the conflict it was given (runs/conflict.py), else "".
    conflict: str = ""
    # The ids of the rules in the attempt's prompt, and the critic's attribution of them
    # (`attributed` false: no critic said anything of them).
    rules: list[str] = []
    rules_followed: list[str] = []
    rules_irrelevant: list[str] = []
    attributed: bool = False

    @field_validator("violations", mode="before")
    @classmethod
    def _legacy_violations(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [Violation.from_legacy(v) if isinstance(v, str) else v for v in value]
        return value


class ExperimentArm(Record):
    """`[experiment]` of an experiment run's run.toml: which experiment, which arm."""

    id: str
    arm: str  # "all", or "no-SUPPORT"
    without: list[str] = []  # the supports removed: rules, progress, feedback, nudges


class SeededFile(Record):
    """A login file copied into the agent's HOME (relative to HOME), as it was copied."""

    path: str
    sha256: str
    copy_back: bool = False  # a credential the agent may refresh


class RunExposure(Record):
    """What a run's processes see, fixed by loopd before its agent first started: the git
    folders of the user's repository, and the agent's HOME with what it was seeded with."""

    git_writable: list[str] = []
    git_readable: list[str] = []
    read_only: list[str] = []  # kept read-only for them, in the tree too (what setup made)
    agent_home: str = ""
    real_home: str = ""
    seeded: list[SeededFile] = []


class Park(Record):
    """`[park]` of run.toml: a run parked on its agent's usage limit."""

    profile: str  # the agent profile whose quota it is
    attempt: int
    started: datetime  # this park
    since: datetime  # the first of the parks in a row (max_wait counts from here)
    count: int = 1  # parks in a row: a wait with no reset time named doubles with each
    message: str = ""  # the agent's words
    reset_named: bool = False  # the message named when the limit resets
    session_id: str = ""
    used_seconds: float = 0.0  # of attempt_timeout, before the park
    asked_whole: bool = False  # what is sent again is a whole prompt (a new session)
    notified: bool = False


class RunRecord(Record):
    """`state/runs/RUN_ID/run.toml`."""

    id: str
    loop: str
    task: str
    trigger: RunTrigger
    started: datetime
    finished: datetime | None = None
    outcome: Outcome | None = None
    reason: str = ""
    cause: Cause | None = None
    branch: str = ""  # "" once loopd deleted it: nothing offers a branch that is gone
    branch_deleted: str = ""  # the branch loopd deleted as the run ended (it changed nothing)
    tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0  # from the profile's `price`, else the agents' own reports
    rules_fired: list[str] = []
    attempts: list[AttemptRecord] = []
    phase: Phase = "preparing"
    isolation: Literal["clone", "worktree", "in-place"] = "worktree"  # older records: worktree
    repo: str = ""
    worktree: str = ""
    base_commit: str = ""
    own_git_dir: str = ""  # loopd's git directory for the run, outside the tree
    repo_git_dir: str = ""  # the user's repository's common git directory
    agent_git_dir: str = ""  # the git directory the agent's git uses (worktree, in-place)
    sandbox: str = ""  # the sandbox in force: "bwrap", or "" / "off" (the guards stay on)
    refs_before: dict[str, str] = {}  # the user's refs when the guard last looked
    refs_at: datetime | None = None  # when that was
    pid: int = 0  # the daemon (or `loopd once`) that ran it
    agent_pids: list[int] = []  # process groups of the running attempt, for a restart to kill
    # Per recorded pid (agent_pids, push_pid): its boot id and start time (/proc/PID/stat
    # field 22), so a restart acts on it only while it is still that process.
    pid_marks: dict[str, str] = {}
    judging_since: datetime | None = None
    exposure: RunExposure | None = None
    resume_at: datetime | None = None  # parked (phase `waiting`): when the agent goes on
    waited: int = 0  # seconds parked, over all parks
    park: Park | None = None  # the current quota wait, kept until a session gets past it
    # The steps of finishing already done (counters, escalation, notified, ...): finishing
    # again after a crash completes the rest without repeating these.
    finish_done: list[str] = []
    experiment: ExperimentArm | None = None  # a run of `loopd experiment`
    # Where the run's work goes (fixed when it starts): `land`, the branch `target` names and
    # the commit it pointed at then; the runs whose branches this one was built on.
    land: str = ""
    target: str = ""
    target_commit: str = ""
    built_on: list[str] = []
    landed: bool = False  # its work is on `target` (or pushed, for land = "push")
    landed_as: str = ""  # the commit `target` was moved to (pushed, for land = "push")
    landed_how: str = ""  # merge, push, or "by hand" (a person merged the branch themselves)
    landing: str = ""  # why it did not land, when it could not
    # What each `done_when` check's test runner counted on the base, in a clean check tree
    # (empty: not counted yet); an attempt that tests less fails (cause checks-weakened).
    base_tests: list[TestCounts] = []
    # The sha256 of each `done_when` check's output where it failed on the base ("" where it
    # passed): a check failing the same way after the agent's edits may be the environment's
    # (runs/sameoutput.py).
    base_failures: list[str] = []
    verified_tree: str = ""  # the tree of the last commit whose clean checks passed here
    push_pid: int = 0  # the process group of a landing push while it runs (reaped on restart)
    # The escalation file (its run id) that holds this run: its own, or the open one of its
    # loop and task it counted in as a repeat ("": not escalated, or not yet filed).
    escalation: str = ""
    retry_not_run: str = ""  # why the retry of this interrupted run could not run

    def branch_gone(self, branch: str) -> None:
        """`branch` was deleted: the record names it as `branch_deleted`, never as `branch`."""
        if branch and self.branch == branch:
            self.branch_deleted, self.branch = branch, ""

    def without(self, support: str) -> bool:
        """Whether this run is an experiment arm without `support`."""
        return self.experiment is not None and support in self.experiment.without


class DaemonStatus(Record):
    pid: int = 0
    version: str = ""
    started: datetime | None = None
    heartbeat: datetime | None = None
    running: bool = False
    warnings: list[str] = []
    sandbox: str = ""  # the sandbox in force for the daemon's runs, in one line
    engine: str = ""  # the engine the daemon serves (kept until it restarts)


class LoopStatus(Record):
    phase: Phase = "idle"
    run: str = ""
    attempt: int = 0
    last_outcome: str = ""
    last_run: str = ""
    next_fire: datetime | None = None
    paused: bool = False
    enabled: bool = True
    error: str = ""  # why the loop is disabled (a broken loop file)
    pending: int = 0
    resume_at: datetime | None = None  # phase `waiting`: when the run or the loop goes on
    waiting_for: str = ""  # phase `waiting`: a usage limit, a token budget
    loaded: bool = True  # false: the daemon has not loaded this loop file (it is broken)
    stale: bool = False  # the file is broken; the daemon keeps its last good configuration
    digest: str = ""  # of the loop file the daemon loaded


class VerifierStatus(Record):
    """`[verifier]` of status.toml: whether the judging model answered its last call."""

    reachable: bool = True
    since: datetime | None = None  # when it became (un)reachable
    last_error: str = ""


class BudgetStatus(Record):
    """`[budget]` of status.toml: today's tokens against `[limits] daily_tokens`."""

    day: str = ""
    tokens: int = 0
    limit: int = 0
    exhausted: bool = False
    until: datetime | None = None


class StatusFile(Record):
    """`state/status.toml`."""

    daemon: DaemonStatus = Field(default_factory=DaemonStatus)
    verifier: VerifierStatus | None = None  # absent without a [verifier]
    budget: BudgetStatus | None = None  # absent without [limits] daily_tokens
    loops: dict[str, LoopStatus] = {}
