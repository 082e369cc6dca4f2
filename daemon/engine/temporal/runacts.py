"""The home's steps of a run: admit, prepare, assemble each prompt, record, judge, learn, finish.

They run on the home's queue (most as local activities of the run workflow) and write the
home's state/ through the same building blocks as the local engine: the run's journal, rule
selection, the prompt, the critic, the rule verifier, `finish_run`.
"""

from __future__ import annotations

import copy
import dataclasses
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import CancelledError

from daemon.clock import utc_now
from daemon.config import LoopConfig
from daemon.engine.temporal import branches
from daemon.engine.temporal.deskrecords import land
from daemon.engine.temporal.homeside import HomeSide, loop_of, remote_for, trimmed
from daemon.engine.temporal.lessons import file_rejected, lesson_rule, write_excerpts
from daemon.engine.temporal.models import (
    Admitted,
    AttemptEnded,
    AttemptPlan,
    BeginAttempt,
    EndOfRun,
    FileLesson,
    FinishInput,
    Judged,
    Learned,
    ParkEnded,
    Prepared,
    RunInput,
    RunRef,
    VerdictInput,
)
from daemon.engine.temporal.names import worker_queue
from daemon.git.safe import Git, GitError
from daemon.git.tree import branch_name
from daemon.git.userrepo import UserRepo
from daemon.model.client import ModelUnavailable
from daemon.model.critic import unjudged
from daemon.redact import redact
from daemon.rules.verifier import verify_candidate
from daemon.runparts import decisions
from daemon.runparts.journal import RunJournal
from daemon.runparts.setup import SETUP_LOG, checks_done_first
from daemon.runparts.startpoint import start_point
from daemon.runparts.stop import RunStopped, StopToken
from daemon.runs.attempt import attempt_prompt
from daemon.runs.judging import VerifierGaveUp, ask_critic, record_verdict
from daemon.runs.learning import (
    DEFERRED_PER_RUN,
    retry_deferred_lessons,
    rule_library,
    rules_of_run,
    select_rules_for_run,
)
from daemon.runs.prompt import build_prompt
from daemon.service.console import ended_lines, say, started_line
from daemon.state.atomic import write_atomic
from daemon.state.eventtypes import Event
from daemon.state.holds import hold_profile
from daemon.state.queuefile import PendingRun
from daemon.state.records import AttemptRecord, Cause, Outcome, RunRecord

# A refused login holds its profile's loops with no end time: the controller asks admission
# again this often, and `loopd check` lifting the hold lets the next ask through.
LOGIN_RECHECK = timedelta(seconds=30)


class _Bundle:
    """The evidence bundle a worker built, as the critic reads it."""

    def __init__(self, text: str, violations: list[str]) -> None:
        self.text = text
        self.violations = violations

    def render(self) -> str:
        return self.text


def _ended(outcome: Outcome, reason: str, cause: Cause) -> Prepared:
    return Prepared(ended=EndOfRun(outcome=outcome, reason=reason, cause=cause))


def _setup_first(prepared: Prepared, cfg: LoopConfig, run: RunRecord) -> Prepared:
    """Whether a worker runs `setup`, and the done check, before the first attempt."""
    prepared.check_done = checks_done_first(cfg, run)
    prepared.setup_first = prepared.check_done or bool(cfg.setup)
    prepared.record = trimmed(run) if prepared.setup_first else None
    return prepared


class RunActivities:
    """The run activities of one home."""

    def __init__(self, side: HomeSide) -> None:
        self.side = side

    def activities(self) -> list[Any]:
        return [
            self.admit,
            self.prepare,
            self.begin_attempt,
            self.attempt_ended,
            self.park_ended,
            self.judge,
            self.file_lesson,
            self.finish,
        ]

    # admit ---------------------------------------------------------------------------------
    @activity.defn(name="admit")
    def admit(self, pending: PendingRun) -> Admitted:
        """Record a pending run that starts now (run.toml, live) and make its workflow's input."""
        from daemon.runs.executor import new_run

        side = self.side
        side.check_controller(pending.loop)
        loaded = side.config()
        loop = loaded.loops.get(pending.loop)
        if loop is None or not loop.config.enabled:
            return Admitted(skipped="the loop is no longer valid or enabled")
        engine, verifier = loaded.daemon.engine, loaded.daemon.verifier
        try:
            run = side.store.load_run(pending.id)  # admitted already (a replay)
        except FileNotFoundError:
            hold = side.hold(loop.name)
            if hold is not None:  # new runs of the loop wait, as with the local engine
                # A refused login has no end: admission is asked again after a while.
                until = hold.until or utc_now() + LOGIN_RECHECK
                return Admitted(held_until=until, held_why=hold.why)
            run = new_run(side.services, loop, pending)
        cfg = loop.config
        return Admitted(
            input=RunInput(
                ref=RunRef(loop=loop.name, run_id=run.id, token=side.token(run.id)),
                config=cfg.model_dump(mode="json"),
                queue=worker_queue(engine.task_queue, cfg.runs_on),
                heartbeat_seconds=engine.heartbeat_timeout.total_seconds(),
                remote=remote_for(engine.remote, loop.name, cfg.repo_path),
                trigger_kind=run.trigger.kind,
                critic=cfg.critic != "off" and verifier.configured,
                learns=verifier.configured,
                verifier=verifier.model_dump(mode="json"),
                verifier_timeout=verifier.timeout.total_seconds(),
                pending_limit=verifier.pending_limit.total_seconds(),
                record=trimmed(run),
            )
        )

    # prepare ---------------------------------------------------------------------------------
    @activity.defn(name="prepare")
    def prepare(self, inp: RunInput) -> Prepared:
        """The run's base published as its branch on the remote; its rules; refuse/escalate."""
        services, journal = self.side.open_run(inp.ref)
        run = journal.run
        loop = loop_of(inp.ref.loop, self.side.home, inp.config)
        cfg = loop.config
        if run.base_commit and run.branch:  # prepared already (the home restarted meanwhile)
            choice = rules_of_run(services, run)
            return _setup_first(
                Prepared(base_commit=run.base_commit, branch=run.branch, rule_ids=choice.rule_ids),
                cfg,
                run,
            )
        journal.event(Event.RUN_STARTED, trigger=run.trigger.kind, reason=run.trigger.reason)
        say([started_line(run)])  # the home's console, as the local engine's
        repo = cfg.repo_path
        base = self._start(journal, cfg)
        try:
            base_commit = Git(repo).out("rev-parse", "--verify", f"{base}^{{commit}}")
        except GitError as exc:
            reason = (
                f"base {base!r} is not a commit in {repo}: {exc.stderr.strip()[:200]}. Fix: set "
                "`base` in the loop file to a branch, tag or commit that exists"
            )
            return _ended("error", reason, Cause.SETUP_FAILED)
        branch = branch_name(loop.name, run.id)
        try:
            branches.publish(repo, inp.remote, branch, base_commit)
        except GitError as exc:
            journal.event(Event.RUN_ERROR, error=str(exc)[:1000])
            reason = f"cannot push the run's branch to [engine] remote {inp.remote}: {exc}"
            return _ended("error", reason[:300], Cause.GIT_FAILED)
        run.branch, run.base_commit, run.worktree = branch, base_commit, ""
        journal.save()
        choice = select_rules_for_run(services, loop, run)
        run.rules_fired = list(choice.rule_ids)
        journal.save()
        prepared = Prepared(base_commit=base_commit, branch=branch, rule_ids=choice.rule_ids)
        # As locally, setup and the done check come first: a run skipped is never refused.
        ending = decisions.refused_by_rule(choice.refuse, choice.escalate)
        if ending is not None:
            prepared.ended = EndOfRun(**ending._asdict())
        return _setup_first(prepared, cfg, run)

    @staticmethod
    def _start(journal: RunJournal, cfg: LoopConfig) -> str:
        """Where the run starts, its landing target and what it builds on, as locally."""
        try:
            return start_point(journal, UserRepo.locate(cfg.repo_path), cfg).base
        except GitError:
            return cfg.base  # resolving the base below says what is wrong

    # each attempt -----------------------------------------------------------------------------
    @activity.defn(name="begin_attempt")
    def begin_attempt(self, inp: BeginAttempt) -> AttemptPlan:
        """Assemble attempt N's prompt here (progress notes, rules, what failed) for a worker."""
        services, journal = self.side.open_run(inp.ref)
        run = journal.run
        loop = loop_of(inp.ref.loop, self.side.home, inp.config)
        run.attempts = [a for a in run.attempts if a.n < inp.n]
        rules_text = rules_of_run(services, run).text
        parts = attempt_prompt(services, loop, journal, inp.n, rules_text)
        limits = services.config.limits
        prompt = redact(build_prompt(copy.copy(parts), limits.prompt_cap))
        write_atomic(journal.attempt_dir(inp.n) / "prompt.md", prompt)
        record = trimmed(run)
        run.attempts.append(AttemptRecord(n=inp.n, started=journal.now(), base_commit=inp.head))
        run.phase = "running"
        journal.save()
        journal.event(Event.ATTEMPT_STARTED, attempt=inp.n)
        profile = services.config.profile(loop.config.agent)
        return AttemptPlan(
            n=inp.n,
            parts=dataclasses.asdict(parts),
            record=record,
            config=inp.config,
            profile=profile.model_dump(mode="json") if profile else {},
            verifier_key_env=services.config.verifier.api_key_env,
            prompt_cap=limits.prompt_cap,
            transcript_cap=limits.transcript_cap,
        )

    @activity.defn(name="attempt_ended")
    def attempt_ended(self, inp: AttemptEnded) -> RunRecord:
        """The worker's record of the attempt, in the home's run.toml and events."""
        services, journal = self.side.open_run(inp.ref)
        run, out = journal.run, inp.output
        record = out.record
        run.attempts = [a for a in run.attempts if a.n < record.n] + [record]
        run.tokens = out.tokens
        run.input_tokens, run.output_tokens = out.input_tokens, out.output_tokens
        run.cost_usd = out.cost_usd
        run.sandbox = out.sandbox or run.sandbox  # as a local run records the one it ran in
        run.rules_fired += [r for r in out.rules_fired if r not in run.rules_fired]
        land(services, journal, out.desk)  # another machine's decisions, evidence, questions
        if out.quota_hold is not None:  # the home holds the profile, for every machine
            profile = out.park.profile if out.park else inp.profile
            hold_profile(services.store, profile, out.quota_hold)
        if out.park is not None and out.resume_at is not None:
            self._parked(services, journal, out)
            return trimmed(run)
        run.phase = "judging"
        run.judging_since = run.judging_since or journal.now()
        journal.save()
        journal.event(
            Event.ATTEMPT_FINISHED,
            attempt=record.n,
            exit_code=record.exit_code,
            nudges=record.nudges,
            stalls=len(record.stalls),
            timed_out=record.timed_out,
            worker=out.worker,
        )
        return trimmed(run)

    def _parked(self, services: Any, journal: RunJournal, out: Any) -> None:
        """The run waits on its agent's usage limit (the workflow's timer): phase `waiting`."""
        run, park = journal.run, out.park
        run.phase, run.resume_at, run.park = "waiting", out.resume_at, park
        journal.save()
        fields = {"resume_at": out.resume_at.isoformat(), "reset_named": park.reset_named}
        journal.event(
            Event.QUOTA_WAIT,
            attempt=park.attempt,
            profile=park.profile,
            message=park.message[-300:],
            count=park.count,
            worker=out.worker,
            **fields,
        )
        loop = self.side.loop(run.loop)
        notifications = services.notifications
        if notifications is None or loop is None or "waiting" not in loop.config.notify_on:
            return
        notifications.quota_wait(run, journal.now())
        park.notified = True
        journal.save()

    @activity.defn(name="park_ended")
    def park_ended(self, inp: ParkEnded) -> RunRecord:
        """The reset has passed: the parked attempt goes on (phase `running` again)."""
        _services, journal = self.side.open_run(inp.ref)
        run = journal.run
        if run.park is not None:
            waited = max(0, int((journal.now() - run.park.started).total_seconds()))
            run.waited += waited
            journal.event(Event.QUOTA_RESUMED, attempt=inp.n, waited_seconds=waited)
        run.phase, run.resume_at, run.park = "running", None, None
        journal.save()
        return trimmed(run)

    # judging -----------------------------------------------------------------------------------
    @activity.defn(name="judge")
    def judge(self, inp: VerdictInput) -> Judged:
        """The checks' result recorded here, and the critic's verdict on the worker's evidence."""
        services, journal = self.side.open_run(inp.ref)
        run, checks = journal.run, inp.checks
        cfg = LoopConfig.model_validate(inp.config)
        attempt = next(a for a in run.attempts if a.n == inp.n)
        folder = journal.attempt_dir(inp.n)
        for name, text in (
            ("checks.log", checks.log.text()),
            ("checks-failed.txt", checks.failed_tail),
        ):
            write_atomic(folder / name, text)
        if checks.diffstat and not (folder / "diffstat.json").exists():
            write_atomic(folder / "diffstat.json", checks.diffstat)
        attempt.checks_passed = checks.passed
        attempt.checks_missing = decisions.missing_programs(
            [(str(r.get("command", "")), r.get("exit_code")) for r in checks.results]
        )
        attempt.violations = list(checks.violations)
        if checks.verified_tree:
            run.verified_tree = checks.verified_tree
        if checks.base_tests and not run.base_tests:
            run.base_tests = list(checks.base_tests)
        journal.save()
        journal.event(Event.CHECKS, attempt=inp.n, passed=checks.passed, results=checks.results)
        if checks.violations:
            journal.event(
                Event.VIOLATIONS,
                attempt=inp.n,
                violations=[v.model_dump() for v in checks.violations],
            )
        if checks.restored:
            journal.event(Event.PROTECTED_RESTORED, paths=checks.restored)
        texts = [v.text() for v in checks.violations]
        if inp.critic:
            rules = self._rules_in_prompt(services, run, attempt)
            try:
                verdict = self._critic(services, journal, cfg, checks, texts, rules)
            except VerifierGaveUp as exc:
                gave_up = EndOfRun(
                    outcome="escalated", reason=str(exc), cause=Cause.VERIFIER_UNAVAILABLE
                )
                return Judged(passed=False, attempt=attempt, gave_up=gave_up)
        else:
            why = 'critic = "off"' if cfg.critic == "off" else "no [verifier] configured"
            verdict = unjudged(checks.passed, texts, why)
        record_verdict(journal, attempt, verdict)
        if not verdict.passed and services.notifications is not None:
            services.notifications.attempt_failed(run, attempt, cfg.notify_on, journal.now())
        return Judged(
            passed=verdict.passed, attempt=attempt, verdict=verdict.model_dump(mode="json")
        )

    @staticmethod
    def _rules_in_prompt(services: Any, run: Any, attempt: Any) -> list[tuple[str, str]]:
        """The rules the attempt's prompt held (the run's rules), for the critic to attribute."""
        reminders = rules_of_run(services, run).reminders
        if not attempt.rules:
            attempt.rules = [rule.id for rule in reminders]
        return [(rule.id, rule.rule) for rule in reminders if rule.id in attempt.rules]

    def _critic(
        self,
        services: Any,
        journal: RunJournal,
        cfg: LoopConfig,
        checks: Any,
        texts: list[str],
        rules: list[tuple[str, str]],
    ) -> Any:
        """The critic's verdict on the worker's evidence bundle, waiting (heartbeating, a
        cancel ends the wait) while the verifier is unavailable, as local judging does."""

        def cancelled() -> bool:
            if not activity.info().is_local:
                activity.heartbeat({"phase": "judging"})
            return activity.is_cancelled()

        attempt = journal.run.attempts[-1]
        bundle = _Bundle(checks.evidence, texts)
        try:
            return ask_critic(
                services,
                journal,
                StopToken(cancelled),
                cfg,
                attempt,
                checks,
                texts,
                rules=rules,
                evidence=bundle,
            )
        except RunStopped:
            raise CancelledError("cancelled by a person") from None

    # learning ----------------------------------------------------------------------------------
    @activity.defn(name="file_lesson")
    def file_lesson(self, inp: FileLesson) -> Learned:
        """The worker's candidate through the home's rule verifier (one writer of rules/)."""
        services, journal = self.side.open_run(inp.ref)
        run, lesson = journal.run, inp.lesson
        # As a local run's learning does, before its own lesson.
        retry_deferred_lessons(services, limit=DEFERRED_PER_RUN)
        library = rule_library(services)
        events, now = services.store.events, services.clock()
        if lesson.decision in ("unavailable", "none", ""):
            if lesson.decision == "unavailable":
                journal.event(Event.RULE_DEFERRED, attempt=inp.n, reason=lesson.error[:300])
            return Learned()
        if lesson.decision == "rejected":
            file_rejected(library, events, lesson, now, run.loop, run.id, run.repo)
            return Learned()
        folder = journal.attempt_dir(inp.n)
        write_excerpts(folder, lesson.excerpts)
        candidate = lesson_rule(lesson, run.repo)
        try:
            result = verify_candidate(
                library,
                candidate,
                folder,
                services.model_client(),
                services.config.verifier,
                events,
                now,
                state_root=services.store.root,
                loop=run.loop,
                run=run.id,
            )
        except ModelUnavailable as exc:
            journal.event(Event.RULE_DEFERRED, attempt=inp.n, reason=str(exc)[:300])
            return Learned()
        if inp.passed or inp.n >= inp.max_attempts or result.decision == "rejected":
            return Learned()
        rule_id = result.duplicate_of or result.rule.id
        stored = library.find(rule_id)
        if stored is None or rule_id in run.rules_fired:
            return Learned()
        run.rules_fired.append(rule_id)
        journal.save()
        journal.event(Event.RULE_FIRED, rule=rule_id, why="learned")
        return Learned(rule_id=rule_id)

    # the end -----------------------------------------------------------------------------------
    @activity.defn(name="finish")
    def finish(self, inp: FinishInput) -> RunRecord:
        """The run's branch into the person's repository, then `finish_run` as locally."""
        from daemon.runs.finish import finish_run

        services, journal = self.side.open_run(inp.ref)
        run = journal.run
        loop = self.side.loop(run.loop)
        if run.branch and run.outcome is None:
            try:
                branches.fetch_branch(Path(run.repo), inp.remote, run.branch)
            except GitError as exc:
                journal.event(Event.BRANCH_FETCH_FAILED, branch=run.branch, error=str(exc)[:300])
        end = inp.ending
        if end.setup_log:  # the tail of a failed setup's log on the worker, for the escalation
            write_atomic(services.store.run_dir(run.id) / SETUP_LOG, end.setup_log)
        finish_run(
            services,
            run,
            end.outcome,
            end.reason,
            end.cause,
            tree=None,
            notify_on=loop.config.notify_on if loop is not None else None,
            config=loop.config if loop is not None else None,
        )
        say(ended_lines(run))
        return trimmed(run)
