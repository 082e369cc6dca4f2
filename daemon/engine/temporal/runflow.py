"""The run workflow (`loopd/LOOP/RUN_ID`): prepare, attempts until one passes, finish.

Workflow code is deterministic: it decides (with daemon/runparts/decisions.py, as the local
executor does) and leaves every read and write to activities. The home's steps are local
activities of the run (on the home's queue, a few milliseconds each); the attempt, its checks
and its post-mortem go to the workers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, TypedDict, cast

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    TimeoutError,
    TimeoutType,
)

with workflow.unsafe.imports_passed_through():
    from daemon.config import LoopConfig
    from daemon.engine.temporal.models import (
        AttemptEnded,
        AttemptInput,
        AttemptOutput,
        AttemptPlan,
        BeginAttempt,
        ChecksInput,
        ChecksOutput,
        EndOfRun,
        FileLesson,
        FinishInput,
        Judged,
        Learned,
        LessonInput,
        LessonOutput,
        ParkEnded,
        Prepared,
        RunInput,
        RunView,
        SetupEnded,
        SetupInput,
        SetupOutput,
        VerdictInput,
    )
    from daemon.runparts import decisions
    from daemon.state.records import AttemptRecord, Cause, RunRecord


class LocalOptions(TypedDict):
    """The options of every local activity, typed so that `**LOCAL` is checked."""

    start_to_close_timeout: timedelta
    retry_policy: RetryPolicy


LOCAL: LocalOptions = {
    "start_to_close_timeout": timedelta(minutes=10),
    "retry_policy": RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1)),
}
ONCE = RetryPolicy(maximum_attempts=1)  # the workflow itself decides what a failure means
# The workflow's patch ids.
LEARN_AFTER_EVERY_PASS = "learn-after-every-pass"
REPOSITORY_CHANGED_ENDS = "repository-changed-ends"
INTERRUPTING = {TimeoutType.HEARTBEAT, TimeoutType.START_TO_CLOSE, TimeoutType.SCHEDULE_TO_START}


def _finish_timeout(inp: RunInput) -> timedelta:
    """How long the home's finish may take: its landing runs setup and the checks, and a
    textual conflict the run's conflict attempt (an agent's attempt, judged) as well."""
    cfg = LoopConfig.model_validate(inp.config)
    checks = cfg.check_timeout * (len(cfg.done_when) + 1) + cfg.setup_timeout
    return LOCAL["start_to_close_timeout"] + cfg.attempt_timeout + 3 * checks


def _causes(exc: BaseException | None) -> list[BaseException]:
    out: list[BaseException] = []
    while exc is not None and len(out) < 10:
        out.append(exc)
        exc = getattr(exc, "cause", None) or exc.__cause__
    return out


def _cancelled(exc: BaseException) -> bool:
    return any(isinstance(e, (CancelledError, asyncio.CancelledError)) for e in _causes(exc))


def _lost(exc: BaseException) -> bool:
    """The worker went silent or stopped: its attempt is interrupted."""
    for cause in _causes(exc):
        if isinstance(cause, TimeoutError) and cause.type in INTERRUPTING:
            return True
        if isinstance(cause, ApplicationError) and cause.type == "Interrupted":
            return True
    return False


def _failed(exc: BaseException) -> EndOfRun:
    """A step that failed: `error`, with the cause its type names (decisions' one table)."""
    kind, message, details = "", str(exc), cast(Sequence[Any], ())
    for cause in _causes(exc):
        if isinstance(cause, ApplicationError):
            kind, message, details = cause.type or "", cause.message, cause.details
    ending = _end(decisions.failure_ending(kind, message))
    if kind == "SetupFailed":  # the worker's setup.log tail comes along, for the escalation
        ending.setup_log = str(details[0]) if details else ""
    return ending


def _end(ending: decisions.Ending) -> EndOfRun:
    return EndOfRun(outcome=ending.outcome, reason=ending.reason, cause=ending.cause)


CANCELLED = EndOfRun(outcome="cancelled", reason="cancelled by a person", cause=Cause.CANCELLED)


def _step_ended(exc: BaseException, trigger_kind: str) -> EndOfRun:
    """How a worker's step that raised ends the run: cancelled, interrupted (its worker was
    lost while preparing or running: neither resumes) or failed."""
    if _cancelled(exc):
        return CANCELLED
    if _lost(exc):
        return _end(decisions.interrupted(trigger_kind))
    return _failed(exc)


@workflow.defn(name="RunWorkflow", failure_exception_types=[Exception])
class RunWorkflow:
    """One run: prepare, attempts until one passes or they are used up, finish."""

    def __init__(self) -> None:
        self._view = RunView(run_id="", phase="preparing", attempt=0)
        self._record: RunRecord | None = None

    @workflow.query(name="view")
    def view(self) -> RunView:
        return self._view

    @workflow.query(name="record")
    def record(self) -> RunRecord | None:
        """The run as the home last recorded it, in its current phase."""
        if self._record is None:
            return None
        return self._record.model_copy(update={"phase": self._view.phase})

    @workflow.run
    async def run(self, inp: RunInput) -> RunRecord:
        self._view.run_id = inp.ref.run_id
        self._record = inp.record
        try:
            ending = await self._steps(inp)
        except asyncio.CancelledError:
            ending = CANCELLED
        except ActivityError as exc:
            ending = CANCELLED if _cancelled(exc) else _failed(exc)
        except Exception as exc:  # noqa: BLE001 - a run ends with an outcome, not a crash
            reason = f"{type(exc).__name__}: {str(exc)[:300]}"
            ending = EndOfRun(outcome="error", reason=reason, cause=Cause.LOOPD_ERROR)
        record = await workflow.execute_local_activity(
            "finish",
            FinishInput(ref=inp.ref, ending=ending, remote=inp.remote),
            result_type=RunRecord,
            start_to_close_timeout=_finish_timeout(inp),
            retry_policy=LOCAL["retry_policy"],
        )
        last = record.attempts[-1] if record.attempts else None
        workflow.upsert_memo(
            {
                "outcome": record.outcome,
                "reason": record.reason,
                "cause": str(record.cause or ""),
                "attempts": len(record.attempts),
                "score": last.score if last else None,
                "finished": record.finished.isoformat() if record.finished else "",
                "tokens": record.tokens,
                "branch": record.branch,
            }
        )
        self._view.phase = "idle"
        self._record = record
        return record

    async def _local(self, name: str, arg: Any, result_type: type) -> Any:
        return await workflow.execute_local_activity(name, arg, result_type=result_type, **LOCAL)

    async def _steps(self, inp: RunInput) -> EndOfRun:
        cfg = LoopConfig.model_validate(inp.config)
        prepared: Prepared = await self._local("prepare", inp, Prepared)
        if prepared.setup_first:
            ended = await self._setup(inp, cfg, prepared)
            if ended is not None:
                return ended
        if prepared.ended is not None:
            return prepared.ended
        head = prepared.base_commit
        attempts: list[AttemptRecord] = []
        for n in range(1, cfg.max_attempts + 1):
            self._view.phase, self._view.attempt = "running", n
            begin = BeginAttempt(ref=inp.ref, n=n, head=head, config=inp.config)
            plan: AttemptPlan = await self._local("begin_attempt", begin, AttemptPlan)
            out, record = await self._attempt_through_parks(inp, cfg, plan, head, n)
            if isinstance(out, EndOfRun):
                return out
            assert record is not None  # an attempt that ran has its record
            self._view.worker = out.worker
            head = out.head
            cut = decisions.cut_short(
                out.start_error,
                out.over_budget,
                out.tokens,
                cfg.max_tokens,
                out.quota_exceeded,
                out.login_refused,
                out.gave_up,
                out.environment,
            )
            if cut is not None:
                return _end(cut)
            self._view.phase = "judging"
            checks = await self._checks(inp, cfg, n, out, record)
            if isinstance(checks, EndOfRun):
                return checks
            head = checks.head
            judged = await self._judge(inp, n, checks)
            if judged.gave_up is not None:
                return judged.gave_up
            assert judged.attempt is not None
            attempts.append(judged.attempt)
            record.attempts = [a for a in record.attempts if a.n < n] + [judged.attempt]
            changed = decisions.repository_changed(judged.attempt)
            # The person's repository, changed: a person looks now (as locally; histories from
            # before replay as they ran).
            if changed is not None and workflow.patched(REPOSITORY_CHANGED_ENDS):
                return _end(changed)
            # After a first-try pass too, as locally; histories from before that replay as they ran.
            if not judged.passed or n > 1 or workflow.patched(LEARN_AFTER_EVERY_PASS):
                self._view.phase = "learning"
                await self._learn(inp, n, judged.passed, out.own_queue, judged, cfg.max_attempts)
            if judged.passed:
                return EndOfRun(
                    outcome="succeeded",
                    reason=decisions.success_reason(judged.attempt),
                    cause=Cause.PASSED,
                )
        return _end(decisions.given_up(attempts, cfg.critic_threshold))

    async def _attempt_through_parks(
        self, inp: RunInput, cfg: LoopConfig, plan: AttemptPlan, head: str, n: int
    ) -> tuple[AttemptOutput | EndOfRun, RunRecord | None]:
        """Attempt `n`, recorded at the home, resumed after each park on a usage limit; with
        the home's record of it (None when the attempt ended the run before one was made)."""
        record = None
        out = await self._attempt(inp, cfg, plan, head, inp.queue, resume=False)
        while not isinstance(out, EndOfRun):
            ended = AttemptEnded(ref=inp.ref, output=out, profile=cfg.agent)
            record = await self._local("attempt_ended", ended, RunRecord)
            self._record = record
            if out.resume_at is None:
                break
            # Parked on the agent's usage limit: a durable timer, no activity, no slot.
            self._view.phase = "waiting"
            left = out.resume_at - workflow.now()
            if left > timedelta(0):
                await workflow.sleep(left)
            await self._local("park_ended", ParkEnded(ref=inp.ref, n=n), RunRecord)
            self._view.phase = "running"
            queue = out.own_queue or inp.queue  # the session and its HOME are there
            out = await self._attempt(inp, cfg, plan, head, queue, resume=True)
        return out, record

    async def _setup(self, inp: RunInput, cfg: LoopConfig, prepared: Prepared) -> EndOfRun | None:
        """`setup` and the done check on a worker of the loop's queue, before any attempt;
        the home records them and says whether the run is done already."""
        assert prepared.record is not None
        args = SetupInput(
            ref=inp.ref,
            record=prepared.record,
            config=inp.config,
            remote=inp.remote,
            head=prepared.base_commit,
            check_done=prepared.check_done,
            heartbeat_seconds=inp.heartbeat_seconds,
        )
        checks = cfg.check_timeout * (len(cfg.done_when) if prepared.check_done else 0)
        try:
            out = await workflow.execute_activity(
                "setup",
                args,
                result_type=SetupOutput,
                task_queue=inp.queue,
                start_to_close_timeout=cfg.setup_timeout + checks + timedelta(minutes=10),
                heartbeat_timeout=timedelta(seconds=inp.heartbeat_seconds),
                retry_policy=ONCE,
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
        except ActivityError as exc:
            return _step_ended(exc, inp.trigger_kind)
        ended: Prepared = await self._local(
            "setup_ended", SetupEnded(ref=inp.ref, output=out), Prepared
        )
        return ended.ended

    async def _attempt(
        self,
        inp: RunInput,
        cfg: LoopConfig,
        plan: AttemptPlan,
        head: str,
        queue: str,
        resume: bool,
    ) -> AttemptOutput | EndOfRun:
        """The attempt on a worker of `queue` (resumed after a park: on its own worker)."""
        extra: dict[str, Any] = {}
        if resume:  # that worker may be busy; gone for longer, the run is interrupted
            extra["schedule_to_start_timeout"] = _attempt_limit(cfg)
        try:
            return await workflow.execute_activity(
                "attempt",
                AttemptInput(
                    ref=inp.ref,
                    plan=plan,
                    remote=inp.remote,
                    head=head,
                    heartbeat_seconds=inp.heartbeat_seconds,
                    resume=resume,
                ),
                result_type=AttemptOutput,
                task_queue=queue,
                start_to_close_timeout=_attempt_limit(cfg),
                heartbeat_timeout=timedelta(seconds=inp.heartbeat_seconds),
                retry_policy=ONCE,
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                **extra,
            )
        except ActivityError as exc:
            return _step_ended(exc, inp.trigger_kind)

    async def _checks(
        self, inp: RunInput, cfg: LoopConfig, n: int, out: AttemptOutput, record: RunRecord
    ) -> ChecksOutput | EndOfRun:
        """The checks in the attempt's own tree (its worker's queue); another worker's when
        that one is gone."""
        args = ChecksInput(
            ref=inp.ref,
            n=n,
            record=record,
            config=inp.config,
            remote=inp.remote,
            head=out.head,
            evidence_tokens=int(inp.verifier.get("evidence_tokens", 12000)),
            heartbeat_seconds=inp.heartbeat_seconds,
        )
        options: dict[str, Any] = {
            "result_type": ChecksOutput,
            "start_to_close_timeout": cfg.check_timeout * (len(cfg.done_when) + 1)
            + timedelta(minutes=10),
            "heartbeat_timeout": timedelta(seconds=inp.heartbeat_seconds),
            "retry_policy": ONCE,
            "cancellation_type": workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        }
        queues = [out.own_queue, inp.queue] if out.own_queue else [inp.queue]
        for i, queue in enumerate(queues):
            extra: dict[str, Any] = {}
            if i + 1 < len(queues):
                extra["schedule_to_start_timeout"] = timedelta(seconds=inp.heartbeat_seconds)
            try:
                return await workflow.execute_activity(
                    "checks", args, task_queue=queue, **options, **extra
                )
            except ActivityError as exc:
                if _cancelled(exc):
                    return CANCELLED
                if not _lost(exc):
                    return _failed(exc)
        return _end(decisions.interrupted(inp.trigger_kind))

    async def _judge(self, inp: RunInput, n: int, checks: ChecksOutput) -> Judged:
        args = VerdictInput(ref=inp.ref, n=n, config=inp.config, checks=checks, critic=inp.critic)
        if not inp.critic:
            return await self._local("judge", args, Judged)
        wait = timedelta(seconds=inp.pending_limit + 10 * inp.verifier_timeout)
        return await workflow.execute_activity(
            "judge",
            args,
            result_type=Judged,
            task_queue=workflow.info().task_queue,
            start_to_close_timeout=wait + timedelta(minutes=5),
            heartbeat_timeout=timedelta(seconds=4 * inp.verifier_timeout + 30),
            retry_policy=RetryPolicy(maximum_attempts=3),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )

    async def _learn(
        self,
        inp: RunInput,
        n: int,
        passed: bool,
        own_queue: str,
        judged: Judged,
        max_attempts: int,
    ) -> None:
        """The post-mortem on the worker that holds the evidence; the rule filed here."""
        if not inp.learns:
            return
        attempt = judged.attempt
        assert attempt is not None
        verdict = {
            "score": attempt.score,
            "verdict": attempt.verdict,
            "feedback": attempt.feedback,
            "checks_passed": attempt.checks_passed,
            "violations": [v.text() for v in attempt.violations],
        }
        lesson = LessonOutput(decision="none")
        if own_queue and decisions.post_mortem_after(passed, n):
            try:
                lesson = await workflow.execute_activity(
                    "post_mortem",
                    LessonInput(
                        ref=inp.ref,
                        n=n,
                        task=str(inp.config.get("task", "")),
                        verdict=verdict,
                        kind_hint="skill" if passed else "",
                        verifier=inp.verifier,
                    ),
                    result_type=LessonOutput,
                    task_queue=own_queue,
                    schedule_to_start_timeout=timedelta(seconds=inp.heartbeat_seconds),
                    start_to_close_timeout=timedelta(seconds=8 * inp.verifier_timeout + 60),
                    retry_policy=ONCE,
                )
            except ActivityError as exc:
                if _cancelled(exc):
                    raise
                lesson = LessonOutput(decision="unavailable", error=str(exc)[:300])
        filing = FileLesson(
            ref=inp.ref, n=n, passed=passed, max_attempts=max_attempts, lesson=lesson
        )
        await self._local("file_lesson", filing, Learned)


def _attempt_limit(cfg: LoopConfig) -> timedelta:
    """How long an attempt activity may take: the agent's time, its checks, and a margin."""
    return (
        cfg.attempt_timeout + cfg.check_timeout * (len(cfg.done_when) + 1) + timedelta(minutes=10)
    )
