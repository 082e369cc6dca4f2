"""What crosses the engine: workflow inputs, signals, activity inputs and results.

Every payload is a pydantic model and stays small: a run's prompt parts, its record without
transcripts, the evidence bundle within `evidence_tokens`, and for a lesson only the lines of
the attempt's files that its claims rest on.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from daemon.state.holds import QuotaHold
from daemon.state.queuefile import PendingRun
from daemon.state.records import (
    AttemptRecord,
    Cause,
    Outcome,
    Park,
    Phase,
    RunRecord,
    TestCounts,
    Trigger,
    Violation,
)

ROUTED_KEPT = 500  # trigger ids a controller remembers (for `loopd trigger --wait`)


class Payload(BaseModel):
    model_config = ConfigDict(extra="ignore")


class RunRef(Payload):
    """A run as the home's activities know it: the token proves the home started it."""

    loop: str
    run_id: str
    token: str


class EndOfRun(Payload):
    outcome: Outcome
    reason: str
    cause: Cause
    setup_log: str = ""  # a failed `setup`: the tail of its log on the worker, for the home


# -- the controller ---------------------------------------------------------------------------


class TriggerBatch(Payload):
    """One signal to a controller: triggers taken together (an inbox's burst, a fire)."""

    triggers: list[Trigger]


class ControllerState(Payload):
    """What a loop's controller carries across continue-as-new."""

    loop: str
    pending: list[PendingRun] = []
    paused: bool = False
    routed: dict[str, str] = {}  # trigger id -> RUN_ID, or "skipped: WHY"
    last_run: str = ""
    last_outcome: str = ""
    waiting: list[Trigger] = []  # triggers signalled but not yet taken


class ControllerView(Payload):
    """The `status` query of a controller."""

    loop: str
    paused: bool
    running: str
    pending: list[str]
    last_run: str
    last_outcome: str
    routed: dict[str, str] = {}
    held_why: str = ""  # what holds its new runs (a usage limit, a spent budget)
    held_until: datetime | None = None


class IntakeInput(Payload):
    loop: str
    triggers: list[Trigger]
    pending: list[PendingRun]
    running: str
    in_place_running: bool = False


class IntakeResult(Payload):
    pending: list[PendingRun]
    routed: dict[str, str]


class PauseInput(Payload):
    loop: str
    paused: bool


class CancelQueued(Payload):
    loop: str
    pending: list[PendingRun]


class Admitted(Payload):
    """A pending run the home has recorded: what its workflow needs."""

    input: RunInput | None = None
    skipped: str = ""  # why the run could not start (the loop is gone): no workflow
    # A usage limit or a spent budget holds the loop's new runs: it stays pending until then.
    held_until: datetime | None = None
    held_why: str = ""


class RunSummary(Payload):
    """A finished run, as the run workflow tells its controller."""

    run_id: str
    outcome: str
    cause: str = ""
    retry: bool = False
    trigger_kind: str = ""


# -- the run ----------------------------------------------------------------------------------


class RunInput(Payload):
    """Everything a run workflow needs; the loop's configuration as the run started with it."""

    ref: RunRef
    config: dict[str, Any]  # LoopConfig, as its model dumps it
    queue: str  # the shared worker queue: `loopd-NAME`
    heartbeat_seconds: float
    remote: str  # where the run's branch lives for every worker
    trigger_kind: str = "manual"
    critic: bool = False  # a model judges the attempts (critic on, a verifier configured)
    learns: bool = False  # failed attempts get a post-mortem (a verifier configured)
    verifier: dict[str, Any] = {}  # VerifierConfig, for the workers' post-mortems
    verifier_timeout: float = 60.0
    pending_limit: float = 21600.0
    record: RunRecord | None = None  # the run as it starts (`loopd show` of a running run)


class BeginAttempt(Payload):
    ref: RunRef
    n: int
    head: str
    config: dict[str, Any]


class AttemptEnded(Payload):
    ref: RunRef
    output: AttemptOutput
    profile: str = ""  # the loop's agent profile: a usage limit holds it


class ParkEnded(Payload):
    """The wait of a run parked on a usage limit is over: attempt `n` goes on."""

    ref: RunRef
    n: int


class Prepared(Payload):
    """The prepared run: its base, branch and rules; or how it ended before any agent."""

    ended: EndOfRun | None = None
    base_commit: str = ""
    branch: str = ""
    rules_text: str = ""
    rule_ids: list[str] = []
    resume_at: int = 1  # the first attempt to run (a restarted run resumes)
    # Before the first attempt a worker makes the run's tree and runs `setup` there, and
    # (`skip_if_done`) `done_when` on the commit the run starts from.
    setup_first: bool = False
    check_done: bool = False
    record: RunRecord | None = None  # the run as prepared, for that worker


class SetupInput(Payload):
    ref: RunRef
    record: RunRecord
    config: dict[str, Any]
    remote: str
    head: str  # the commit the run starts from
    check_done: bool
    heartbeat_seconds: float


class SetupOutput(Payload):
    """How `setup` and the done check went on a worker (logs as their bounded tails)."""

    setup_log: str = ""  # "" when the loop has no `setup`
    done_checked: bool = False
    done_passed: bool = False
    results: list[dict[str, Any]] = []  # the done check's command, exit_code
    done_log: str = ""
    worker: str = ""
    base_tests: list[TestCounts] = []  # what the done check's test runners counted
    base_failures: list[str] = []  # the digests of its failing outputs (runs/sameoutput.py)
    environment: str = ""  # a check that failed for the environment: the run's reason


class SetupEnded(Payload):
    ref: RunRef
    output: SetupOutput


class AttemptPlan(Payload):
    """What the home's `begin_attempt` hands to a worker."""

    n: int
    parts: dict[str, str]  # PromptParts
    record: RunRecord  # the run as far as it went, without transcripts
    config: dict[str, Any]
    profile: dict[str, Any]  # the home's AgentProfile (a worker's own profile of the name wins)
    verifier_key_env: str = ""  # withheld from the agent
    prompt_cap: int
    transcript_cap: int


class AttemptInput(Payload):
    ref: RunRef
    plan: AttemptPlan
    remote: str
    head: str  # the commit the attempt starts from
    heartbeat_seconds: float
    resume: bool = False  # the attempt parked on a usage limit goes on (its worker's queue)


class AskedQuestion(Payload):
    """An agent's question (ask_person) as a worker filed it, for the home to file too."""

    question: str
    attempt: int
    asked: datetime


class DeskRecords(Payload):
    """What the agent's tools wrote on the worker during one attempt step
    (engine/temporal/deskrecords.py): the home lands it in its own state/ unless the worker's
    state/ is the home's (same `home_id`)."""

    home_id: str = ""  # the worker's state/home-id
    decisions: str = ""  # the sections this step added to decisions.md (whole sections)
    evidence: list[str] = []  # the lines this step added to evidence.jsonl (whole lines)
    questions: list[AskedQuestion] = []
    cut: bool = False  # more was written than a payload carries; the rest stayed there


class AttemptOutput(Payload):
    """The worker's account of an attempt: its record, its commit, where it ran."""

    record: AttemptRecord
    head: str
    start_error: str = ""
    over_budget: bool = False
    tokens: int = 0
    input_tokens: int = 0  # the run's, as tokens: run.toml keeps both parts
    output_tokens: int = 0
    cost_usd: float = 0.0
    worker: str = ""  # identity of the worker process
    own_queue: str = ""  # that worker's own queue: checks and post-mortem go there
    sandbox: str = ""  # the sandbox the attempt's processes ran in, for the home's record
    # A usage limit: the hold the home writes; parked (the attempt open, to resume after
    # `resume_at`), or past max_wait (the run escalates, why in `quota_exceeded`).
    quota_hold: QuotaHold | None = None
    park: Park | None = None
    resume_at: datetime | None = None
    quota_exceeded: str = ""
    login_refused: str = ""  # the agent's provider refused its login: the run escalates
    gave_up: str = ""  # the agent gave up after its one nudge: how, in its words; escalates
    environment: str = ""  # a check failed as on the base, the environment's: escalates
    # The run's fired rules as the attempt left them: the ones the agent asked for with
    # `rules_for` are added (runs/deskwork.py), for the home's run.toml.
    rules_fired: list[str] = []
    # The agent's decisions, evidence and questions of this step, for the home's state/.
    desk: DeskRecords | None = None


class ChecksInput(Payload):
    ref: RunRef
    n: int
    record: RunRecord
    config: dict[str, Any]
    remote: str
    head: str
    evidence_tokens: int
    heartbeat_seconds: float


class SparseFile(Payload):
    """Lines of one file of an attempt folder, at their line numbers (1-based)."""

    name: str
    total: int
    lines: dict[int, str]

    def text(self) -> str:
        """The file with the lines not carried left blank, so line numbers hold."""
        out = [""] * self.total
        for number, line in self.lines.items():
            if 0 < number <= self.total:
                out[number - 1] = line
        return "\n".join(out)


class ChecksOutput(Payload):
    passed: bool
    results: list[dict[str, Any]]  # command, exit_code
    violations: list[Violation]
    log: SparseFile  # checks.log
    failed_tail: str  # checks-failed.txt
    diffstat: str = ""  # diffstat.json
    evidence: str  # the critic's evidence bundle, rendered
    summary: str = ""
    head: str  # after protected paths were put back
    restored: list[str] = []
    worker: str = ""
    verified_tree: str = ""  # the commit's tree when its clean checks passed (landing's)
    base_tests: list[TestCounts] = []  # the base's counts, when the worker counted them now


class VerdictInput(Payload):
    ref: RunRef
    n: int
    config: dict[str, Any]
    checks: ChecksOutput
    critic: bool


class Judged(Payload):
    passed: bool
    attempt: AttemptRecord | None = None  # as judged
    verdict: dict[str, Any] = {}  # the critic's Verdict
    gave_up: EndOfRun | None = None  # the verifier stayed down past pending_limit


class LessonInput(Payload):
    ref: RunRef
    n: int
    task: str
    verdict: dict[str, Any]
    kind_hint: str = ""
    verifier: dict[str, Any]


class LessonOutput(Payload):
    """The post-mortem's candidate after grounding on the worker, with its evidence lines."""

    decision: str = ""  # accepted | rejected | unavailable | none
    rule: dict[str, Any] = {}
    reasons: list[str] = []
    missing: list[str] = []
    excerpts: list[SparseFile] = []
    error: str = ""


class FileLesson(Payload):
    ref: RunRef
    n: int
    passed: bool
    max_attempts: int
    lesson: LessonOutput


class Learned(Payload):
    rule_id: str = ""
    rules_text: str = ""  # the run's reminders, with the new rule


class FinishInput(Payload):
    ref: RunRef
    ending: EndOfRun
    remote: str


class RunView(Payload):
    """The `view` query of a run workflow."""

    run_id: str
    phase: Phase
    attempt: int
    worker: str = ""


Admitted.model_rebuild()
AttemptEnded.model_rebuild()
