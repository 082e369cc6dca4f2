"""Pydantic models of what loopd writes to `state/`: triggers, runs, attempts, status."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

TriggerKind = Literal["schedule", "push", "change", "manual", "catch-up", "retry"]
Outcome = Literal["succeeded", "escalated", "refused", "interrupted", "cancelled", "error"]
Phase = Literal["idle", "queued", "preparing", "running", "judging", "learning", "paused"]
OUTCOMES: tuple[str, ...] = Outcome.__args__  # type: ignore[attr-defined]


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

    def summary(self) -> dict[str, Any]:
        """What run.toml keeps of a merged trigger."""
        out: dict[str, Any] = {"kind": self.kind, "ts": self.ts}
        for key in ("reason", "ref", "old", "new"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.paths:
            out["paths"] = self.paths
        return out


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
    score: int | None = None
    verdict: str = ""
    feedback: str = ""
    judged: bool = False  # scored by the critic model
    violations: list[str] = []  # protected paths changed, refs moved
    tokens: int = 0
    cost_usd: float = 0.0  # where the agent reports it
    timed_out: bool = False
    summary: str = ""  # the agent's final text, kept for the critic
    session_id: str = ""
    base_commit: str = ""  # the tree's commit when the attempt started
    head_commit: str = ""  # loopd's commit of what the agent left


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
    branch: str = ""
    tokens: int = 0
    cost_usd: float = 0.0  # summed from the agents' usage reports, where they give one
    rules_fired: list[str] = []
    attempts: list[AttemptRecord] = []
    phase: Phase = "preparing"
    isolation: Literal["worktree", "in-place"] = "worktree"
    repo: str = ""
    worktree: str = ""
    base_commit: str = ""
    refs_before: dict[str, str] = {}
    pid: int = 0  # the daemon (or `loopd once`) that ran it
    agent_pids: list[int] = []  # process groups of the running attempt, for a restart to kill
    judging_since: datetime | None = None


class DaemonStatus(Record):
    pid: int = 0
    version: str = ""
    started: datetime | None = None
    heartbeat: datetime | None = None
    running: bool = False
    warnings: list[str] = []


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


class StatusFile(Record):
    """`state/status.toml`."""

    daemon: DaemonStatus = Field(default_factory=DaemonStatus)
    loops: dict[str, LoopStatus] = {}
