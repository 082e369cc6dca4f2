"""A run from trigger to outcome, as a state machine: prepare, attempt, judge, learn, finish.

The steps live in their own modules (runs/attempt.py, judging.py, learning.py, finish.py);
this one only decides what comes next. Every step writes run.toml before it starts work that
a crash could interrupt, so a restarted daemon can tell a run that was mid-attempt
(interrupted, retried once) from one whose agent was done (judging resumes).
"""

from __future__ import annotations

import os
from typing import NoReturn

from daemon.config import Loop
from daemon.git.guards import restore_paths
from daemon.git.integrity import ledger_writer, publish, relabel
from daemon.git.messages import attempt_state, commit_message
from daemon.git.tree import RunTree, TreeError, locate_user, prepare_tree, record_tree, reopen_tree
from daemon.git.userrepo import UserRepo
from daemon.redact import redact, redact_value
from daemon.runparts import decisions
from daemon.runparts.checktree import done_already
from daemon.runparts.confinement import choose_sandbox
from daemon.runparts.journal import RunJournal
from daemon.runparts.services import RunServices
from daemon.runparts.setup import (
    already_done_reason,
    checks_done_first,
    setup_failed_reason,
    setup_tree,
)
from daemon.runparts.startpoint import landing_target, start_point
from daemon.runparts.stop import RunStopped, StopToken
from daemon.runs.attempt import Attempt, commit_attempt
from daemon.runs.attemptresult import CheckedCommit
from daemon.runs.envprobe import base_failure
from daemon.runs.finish import (
    end_without_agent,
    finish_interrupted,
    finish_run,
    kill_run_leftovers,
    locate_worktree,
)
from daemon.runs.judging import VerifierGaveUp, judge_attempt, record_verdict
from daemon.runs.learning import (
    RuleChoice,
    learn_from_attempt,
    rules_of_run,
    select_rules_for_run,
)
from daemon.runs.overlapnote import overlap_note
from daemon.runs.slots import take_slot
from daemon.scheduling.queue import PendingRun
from daemon.state.atomic import ensure_dir
from daemon.state.background import Background
from daemon.state.eventtypes import Event
from daemon.state.landholds import effective_land
from daemon.state.records import (
    AttemptRecord,
    Cause,
    ExperimentArm,
    Outcome,
    RunRecord,
    RunTrigger,
    is_experiment,
)

__all__ = [
    "WEDGE_MARGIN",
    "RunExecutor",
    "end_without_agent",
    "finish_interrupted",
    "kill_run_leftovers",
    "locate_worktree",
    "new_run",
]

WEDGE_MARGIN = 600.0  # seconds beyond the longest step before a silent worker counts as stuck


def new_run(
    services: RunServices,
    loop: Loop,
    pending: PendingRun,
    experiment: ExperimentArm | None = None,
    behind: bool = False,
) -> RunRecord:
    """Create the run's record (phase `preparing`) and its folder, under the pending run's id.
    `behind`: its record and live marker are made durable on a thread of their own
    (`StateStore.begin_run`), so the run's thread starts at once."""
    ensure_dir(services.store.run_dir(pending.id))
    trigger = pending.run_trigger()
    if experiment is None:  # an arm never lands
        store, now = services.store, services.clock()
        trigger.overlaps = overlap_note(store, pending.id, loop.name, loop.config, now)
    run = RunRecord(
        id=pending.id,
        loop=loop.name,
        task=redact(loop.config.task),  # run.toml, commit messages and notes leave the machine
        trigger=RunTrigger.model_validate(redact_value(trigger.model_dump())),
        started=services.clock(),
        phase="preparing",
        isolation=loop.config.isolation,
        repo=str(loop.config.repo_path),
        pid=os.getpid(),
        experiment=experiment,
    )
    services.store.begin_run(run, behind=behind)
    return run


class _Ended(Exception):
    """The run has its outcome; nothing more to do."""


class RunExecutor:
    """Executes one run; `cancel()` and `interrupt()` may be called from other threads."""

    def __init__(self, services: RunServices, loop: Loop, run: RunRecord) -> None:
        self.services = services
        self.loop = loop
        self.cfg = loop.config
        self.journal = RunJournal(services, run)
        self.stop = StopToken(lambda: services.store.cancel_requested(run.id))
        self.tree: RunTree | None = None
        self.rules = RuleChoice()

    @property
    def run(self) -> RunRecord:
        return self.journal.run

    # control from other threads ------------------------------------------------
    def cancel(self) -> None:
        """Stop the run now; its outcome is `cancelled`."""
        self.stop.cancel()

    def interrupt(self, grace: float) -> None:
        """Daemon shutdown: let the running attempt finish within `grace`, then kill it."""
        self.stop.interrupt(grace)

    @property
    def progress_at(self) -> float:
        """time.monotonic() of the run's last sign of progress."""
        return self.journal.heartbeat

    @progress_at.setter
    def progress_at(self, value: float) -> None:
        self.journal.heartbeat = value

    def wedged(self, now_monotonic: float) -> bool:
        """No progress for longer than any step of a run may take: the worker is stuck."""
        cfg = self.cfg
        longest = max(
            cfg.attempt_timeout.total_seconds(),
            cfg.check_timeout.total_seconds() * (len(cfg.done_when) + 1),
            cfg.stall_after.total_seconds(),
            cfg.setup_timeout.total_seconds() if cfg.setup else 0.0,
        )
        return bool(self.journal.idle_for(now_monotonic) > longest + WEDGE_MARGIN)

    # the run -----------------------------------------------------------------
    def execute(self) -> RunRecord:
        """Run to an outcome (or leave it resumable when the daemon stops mid-judging)."""
        self.stop.watch()
        try:
            self._run()
        except _Ended:
            pass
        except RunStopped as stopped:
            # A retry is not retried again: it goes to a person. While judging or
            # parked, nothing ends: both resume after a restart.
            ending = decisions.stopped(stopped.why, self.run.phase, self.run.trigger.kind)
            if ending is not None:
                self._finish(*ending)
        except Exception as exc:  # noqa: BLE001 - a run must end with an outcome, not a crash
            ending = decisions.failed(exc)
            if ending.cause in (Cause.GIT_FAILED, Cause.LOOPD_ERROR):
                self.journal.event(Event.RUN_ERROR, error=f"{type(exc).__name__}: {exc}"[:1000])
            self._finish(*ending)
        finally:
            self.stop.close()
        return self.run

    def _run(self) -> None:
        run = self.run
        parked = False
        if run.phase in decisions.AGENT_DONE and run.attempts:
            # Resumed after a restart: the last attempt's agent was done.
            self._reopen()
            last = run.attempts[-1]
            self.journal.event(Event.RUN_RESUMED, phase="judging", attempt=last.n)
            self._judge(last, None)
            start = last.n + 1
        elif run.phase == "waiting" and run.park is not None and run.attempts:
            # Resumed after a restart while parked on a usage limit: the attempt goes on.
            self._reopen()
            start, parked = run.attempts[-1].n, True
            self.journal.event(Event.RUN_RESUMED, phase="waiting", attempt=start)
        else:
            self._prepare()
            start = 1
        for n in range(start, self.cfg.max_attempts + 1):
            self.stop.raise_if_stopped()
            assert self.tree is not None
            if not (parked and n == start):
                # A run that gave its slot back (to wait for the verifier) works again.
                take_slot(self.services.slots, run.id, self.stop, self.journal.beat)
            attempt = Attempt(
                self.services,
                self.loop,
                self.journal,
                self.stop,
                self.tree,
                self.rules.text,
                n,
                rule_ids=[rule.id for rule in self.rules.reminders],
                parked=parked and n == start,
            )
            result = attempt.run()
            ending = decisions.cut_short(
                result.start_error,
                result.over_budget,
                run.tokens,
                self.cfg.max_tokens,
                result.quota_exceeded,
                result.login_refused,
                result.gave_up,
                result.environment,
            )
            if ending is not None:
                self._commit(result.record)
                self._end(*ending)
            # An agent that ended within the shutdown grace is judged in what is left of it;
            # a stop past it leaves the run judging, resumed by the next start.
            finishing = self.stop.finishing() if result.ended_in_grace else None
            self._judge(result.record, result.checked, finishing)
        self._end("escalated", *self._why_given_up())

    def _reopen(self) -> None:
        """After a restart: the run's tree and rules as they were."""
        run = self.run
        self.tree = reopen_tree(run, self.services.config.limits.worktrees_path)
        record_tree(run, self.tree)
        self.rules = rules_of_run(self.services, run)

    def _prepare(self) -> None:
        run = self.run
        self.journal.event(Event.RUN_STARTED, trigger=run.trigger.kind, reason=run.trigger.reason)
        repo = self.cfg.repo_path
        if not repo.is_dir():  # moved or deleted since the loop was loaded
            raise TreeError(
                f"the repository {repo} that `repo` in {self.loop.path} names is gone (moved or "
                "deleted since loopd loaded the loop). Fix: put it back, or set `repo` to where "
                "it is now (`loopd check` says what is wrong), then retry the run"
            )
        self._sandbox()
        self.tree = self._make_tree(locate_user(repo))
        self.tree.sandbox = run.sandbox
        record_tree(run, self.tree)
        if self.cfg.setup or checks_done_first(self.cfg, run):
            # Saved before setup or the checks run in the tree. Else the attempt's save,
            # moments later and durable before the agent runs, is the next a restart
            # needs: one that finds the run `preparing` finds its tree at its usual place
            # (finish.locate_worktree), and the run is retried.
            self.journal.save()
        self._setup_and_skip()
        if not run.without("rules"):
            self.rules = select_rules_for_run(self.services, self.loop, run)
        # Saved with the attempt's start or the run's end, moments later: one fsync fewer on
        # the way to the agent (a crash between counts no rule either way, see finish.py).
        run.rules_fired = list(self.rules.rule_ids)
        ending = decisions.refused_by_rule(self.rules.refuse, self.rules.escalate)
        if ending is not None:
            self._end(*ending)

    def _make_tree(self, user: UserRepo) -> RunTree:
        """The run's tree at its start point, made once a hosted push's commit is fetched.
        Read meanwhile on threads of their own: the person's git-lfs setup (the tree's git
        needs it) and the landing target (in the record before the agent starts)."""
        run, cfg = self.run, self.cfg
        lfs = Background(user.lfs_storage)
        target = None
        if decisions.records_target(cfg.isolation):
            held = effective_land(self.services.store, run.loop, cfg.land) != cfg.land
            target = Background(landing_target, user, cfg, is_experiment(run) or held)
        last_success = decisions.builds_on_last_success(cfg.build_on, cfg.isolation)
        if last_success:
            self._await_fetch()  # the start point resolves the base
        start = start_point(self.journal, user, cfg, target=False)
        if not last_success:
            self._await_fetch()
        # The run's record durable (begun on its own thread, `new_run`) before the tree and
        # its branch exist: a loopd that dies from here on leaves a record for the restart to
        # finish, never a branch and a tree of a run it does not know.
        self.journal.settle()
        tree = prepare_tree(
            cfg.repo_path,
            self.loop.name,
            run.id,
            cfg.isolation,
            start.base,
            self.services.config.limits.worktrees_path,
            ledger_writer(self.journal),
            user=user,
            lfs=lfs.result,
        )
        if target is not None:
            run.land, run.target, run.target_commit = target.result()
        return tree

    def _await_fetch(self) -> None:
        """A hosted push's run: its commit is fetched into the repository before the tree is
        made (the delivery's trigger was written as it came, the fetch meanwhile)."""
        trigger, wait = self.run.trigger, self.services.remote_fetch
        if wait is None or trigger.kind != "push" or not trigger.remote or not trigger.new:
            return
        branch = trigger.ref.removeprefix("refs/heads/")
        error = wait(
            self.cfg.repo_path, trigger.remote, branch, trigger.new, lambda: self.stop.stopped
        )
        self.stop.raise_if_stopped()
        if error:
            reason = f"the pushed commit could not be fetched: {error}"[:1000]
            self._end("error", reason, Cause.GIT_FAILED)

    def _sandbox(self) -> None:
        """Say which sandbox the run's processes get; a refused run ends here."""
        choose_sandbox(self.services, self.journal)

    def _setup_and_skip(self) -> None:
        """`setup` in the run's tree, then `done_when` where it starts: done already, skipped."""
        run, cfg, tree = self.run, self.cfg, self.tree
        assert tree is not None
        result = setup_tree(self.journal, self.stop, tree.path, tree.own, cfg)
        if result is not None and not result.passed:
            self._end("error", setup_failed_reason(run.id, result), Cause.SETUP_FAILED)
        if not checks_done_first(cfg, run):
            return
        checks = done_already(self.journal, self.stop, tree, cfg)
        self.journal.event(
            Event.DONE_CHECK,
            passed=checks.passed,
            commit=tree.base_commit,
            results=[{"command": r.command, "exit_code": r.exit_code} for r in checks.results],
        )
        if checks.passed:
            self._end("skipped", already_done_reason(tree.base_commit), Cause.ALREADY_DONE)
        failure = base_failure(self.journal, tree.path, cfg, checks)
        if failure is not None:  # no agent can mend it: said now, with no attempt spent
            self._end("escalated", failure.reason(), Cause.ENVIRONMENT)

    def _relabel(self, attempt: AttemptRecord) -> None:
        """The attempt's commit says what it holds now that it is judged."""
        if self.tree is None or not attempt.head_commit:
            return
        if attempt.head_commit == (attempt.base_commit or self.run.base_commit):
            return  # the attempt changed nothing: its head is where it started, not its own
        message = commit_message(self.run, attempt.n, attempt_state(attempt))
        attempt.head_commit = relabel(self.journal, self.tree, attempt.head_commit, message)
        self.journal.save()

    def _commit(self, attempt: AttemptRecord) -> str:
        assert self.tree is not None
        return commit_attempt(self.journal, self.tree, attempt)

    # judging and learning ---------------------------------------------------
    def _judge(
        self, attempt: AttemptRecord, checked: CheckedCommit | None, stop: StopToken | None = None
    ) -> None:
        """Judge the attempt and learn from it; ends the run when it passed or cannot go on.
        `stop`: what stops the judging, when not the run's own token."""
        run, journal = self.run, self.journal
        assert self.tree is not None
        run.phase = "judging"
        if run.judging_since is None:
            run.judging_since = journal.now()
        journal.save()
        head = self._commit(attempt)
        try:
            judged = judge_attempt(
                self.services,
                journal,
                stop or self.stop,
                self.tree,
                self.cfg,
                attempt,
                head,
                checked,
                rules=[(r.id, r.rule) for r in self.rules.reminders if r.id in attempt.rules],
            )
        except VerifierGaveUp as exc:
            self._end("escalated", str(exc), Cause.VERIFIER_UNAVAILABLE)
        verdict = judged.verdict
        attempt.checks_passed = judged.checks.passed
        attempt.violations = judged.violations
        record_verdict(journal, attempt, verdict)
        self._relabel(attempt)
        changed = decisions.repository_changed(attempt)
        if changed is not None:
            self._end(*changed)
        if verdict.passed:
            self._learn(attempt, passed=True)
            self._end("succeeded", self._success_reason(attempt), Cause.PASSED)
        if self.services.notifications is not None and not is_experiment(run):
            self.services.notifications.attempt_failed(
                run, attempt, self.cfg.notify_on, journal.now()
            )
        self._learn(attempt, passed=False)
        self._restore_protected(attempt)

    def _success_reason(self, attempt: AttemptRecord) -> str:
        return decisions.success_reason(attempt)

    def _learn(self, attempt: AttemptRecord, passed: bool) -> None:
        run = self.run
        if not decisions.learns(is_experiment(run)):
            return
        run.phase = "learning"
        self.journal.save()
        rule = learn_from_attempt(
            self.services, self.journal, self.cfg.max_attempts, attempt, passed
        )
        if rule is not None:
            self.rules.add(rule)
            run.rules_fired.append(rule.id)
            self.journal.save()
            self.journal.event(Event.RULE_FIRED, rule=rule.id, why="learned")

    def _restore_protected(self, attempt: AttemptRecord) -> None:
        protected = [v.target for v in attempt.violations if v.kind == "protected"]
        if protected and self.tree is not None:
            head = restore_paths(self.tree.git, self.run.base_commit, protected)
            if head is not None:
                publish(self.journal, self.tree, head)
            self.journal.event(Event.PROTECTED_RESTORED, paths=protected)

    # the end -----------------------------------------------------------------
    def _why_given_up(self) -> tuple[str, Cause]:
        """The reason and cause of a run whose attempts are used up."""
        ending = decisions.given_up(self.run.attempts, self.cfg.critic_threshold)
        return ending.reason, ending.cause

    def _end(self, outcome: Outcome, reason: str, cause: Cause) -> NoReturn:
        """Finish the run with this outcome and leave the state machine."""
        self._finish(outcome, reason, cause)
        raise _Ended()

    def _finish(self, outcome: Outcome, reason: str, cause: Cause) -> None:
        try:
            finish_run(
                self.services,
                self.run,
                outcome,
                reason,
                cause,
                tree=self.tree,
                notify_on=self.cfg.notify_on,
                config=self.cfg,
            )
        except Exception as exc:  # noqa: BLE001 - the live marker stays: recovery finishes it
            self.journal.event(Event.FINISH_FAILED, error=f"{type(exc).__name__}: {exc}"[:1000])
