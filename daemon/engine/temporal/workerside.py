"""A worker's activities: an attempt, its checks, its post-mortem, on this machine.

The attempt takes its tree from `[engine] remote` at the commit the run has reached, runs
the agent with loopd's own Attempt (sessions, stalls, nudges), commits and pushes the work.
It heartbeats while the agent works, with the time of the agent's last output, so the engine
notices a dead worker within `heartbeat_timeout`; a cancel reaches the agent through the
run's StopToken. The checks run in the same tree when they can (the worker's own queue), and
send the home the evidence bundle, never the transcript.
"""

from __future__ import annotations

import contextvars
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, CancelledError

from daemon.clock import utc_now
from daemon.config import AgentProfile, LoadedConfig, Loop, LoopConfig, VerifierConfig
from daemon.engine.temporal import branches
from daemon.engine.temporal.deskrecords import carried, marks
from daemon.engine.temporal.homeside import Configured
from daemon.engine.temporal.models import (
    AttemptInput,
    AttemptOutput,
    ChecksInput,
    ChecksOutput,
    LessonInput,
    LessonOutput,
    SparseFile,
)
from daemon.engine.temporal.workerstore import WorkerStore
from daemon.excerpt import kept_lines
from daemon.git.guards import restore_paths, snapshot_refs
from daemon.git.integrity import ledger_writer, publish
from daemon.git.safe import Git, GitError
from daemon.git.tree import RunTree, TreeError, record_tree, remove_scratch, tree_of_record
from daemon.home import Home
from daemon.model.client import ModelClient
from daemon.model.evidence import build_evidence
from daemon.people.notify import Notifications
from daemon.runparts import decisions
from daemon.runparts.confinement import SandboxUnavailable, choose_sandbox
from daemon.runparts.journal import RunJournal
from daemon.runparts.services import RunServices
from daemon.runparts.setup import setup_failed_reason, setup_tail, setup_tree
from daemon.runparts.stop import RunStopped, StopToken
from daemon.runs.attempt import Attempt, commit_attempt
from daemon.runs.judging import judge_attempt
from daemon.runs.prompt import PromptParts
from daemon.state.eventtypes import Event
from daemon.state.records import AttemptRecord, RunRecord
from daemon.state.stored import is_stored

if TYPE_CHECKING:
    from daemon.runs.attemptresult import AttemptResult

LOG_WHOLE = 256_000  # checks.log travels whole up to this size, else its excerpt


def failure(exc: BaseException) -> ApplicationError:
    """A step that failed for good: its type names the cause the run ends with."""
    kind, message = decisions.failure_kind(exc), decisions.failure_message(exc)
    return ApplicationError(message[:1000], type=kind, non_retryable=True)


class Heartbeat:
    """Heartbeats from a thread of the activity's own context; turns a cancel into a stop."""

    def __init__(self, stop: StopToken, journal: RunJournal, every: float, grace: float) -> None:
        self.stop, self.journal, self.every, self.grace = stop, journal, every, grace
        self.phase = "attempt"
        self._done = threading.Event()

    def _beat(self) -> None:
        while not self._done.wait(self.every):
            quiet = time.monotonic() - self.journal.heartbeat
            activity.heartbeat({"phase": self.phase, "quiet_for": round(quiet, 1)})
            if activity.is_worker_shutdown():
                self.stop.interrupt(self.grace)
            elif activity.is_cancelled():
                details = activity.cancellation_details()
                if details is not None and details.worker_shutdown:
                    self.stop.interrupt(0)
                else:
                    self.stop.cancel()

    @contextmanager
    def running(self) -> Iterator[Heartbeat]:
        context = contextvars.copy_context()
        thread = threading.Thread(target=context.run, args=(self._beat,), daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._done.set()
            thread.join(timeout=5)


class WorkerSide(Configured):
    """The attempts this machine runs, for whichever home owns the engine."""

    def __init__(
        self,
        home: Home,
        loaded: LoadedConfig,
        identity: str,
        own_queue: str,
        beside_home: bool = False,
    ) -> None:
        super().__init__(home, loaded)
        self.identity = identity
        self.own_queue = own_queue
        self.beside_home = beside_home  # this machine's state/ is the home's
        rotate = loaded.daemon.limits.events_rotate
        self.store = WorkerStore(home.state_dir, rotate, beside_home=beside_home)
        self._checked: dict[tuple[str, int], Any] = {}  # checks run at a session's end

    def activities(self) -> list[Any]:
        return [self.attempt, self.checks, self.post_mortem]

    # this machine ----------------------------------------------------------------------------
    def repo_for(self, loop: str, config: LoopConfig) -> Path:
        """This machine's copy of the loop's repository: its own loop file's `repo`."""
        own = self.config().loops.get(loop)
        if own is not None:
            return own.config.repo_path
        home_repo = config.repo_path
        if (home_repo / ".git").exists():
            return home_repo
        raise TreeError(
            f"this worker ({self.identity}) has no loops/{loop}.toml naming its copy of the "
            f"repository, and {home_repo} is not one here. Fix: add {self.home.loops_dir}/"
            f'{loop}.toml with repo = "PATH OF THE CLONE" (and the loop\'s task)'
        )

    def services(
        self, agent: str = "", profile: dict | None = None, caps: tuple = ()
    ) -> RunServices:
        """Services for one step: this machine's configuration, the home's profile when this
        machine has none of that name, the home's prompt and transcript caps."""
        own = self.config().daemon
        agents = dict(own.agents)
        if agent and agent not in agents and profile is not None:
            agents[agent] = AgentProfile.model_validate(profile)
        limits = own.limits
        if caps:
            limits = limits.model_copy(update={"prompt_cap": caps[0], "transcript_cap": caps[1]})
        config = own.model_copy(update={"agents": agents, "limits": limits})
        # The home's own worker files an agent's question (`ask_person`) in the home's state/
        # and notifies it; another machine's question is filed and notified by the home
        # (deskrecords.py), and its agent's notes are refused (they would stay here).
        notifications = Notifications(own.notify, self.store.events)
        here = self.beside_home and notifications.configured
        return RunServices(
            home=self.home,
            config=config,
            store=self.store,
            notifications=notifications if here else None,
            notes_taken=self.beside_home,
        )

    # the attempt -------------------------------------------------------------------------
    @activity.defn(name="attempt", no_thread_cancel_exception=True)
    def attempt(self, inp: AttemptInput) -> AttemptOutput:
        """Run one attempt here: tree from the remote, the agent, the commit pushed back."""
        plan = inp.plan
        config, services, repo = self._loop_here(
            inp.ref, plan.config, agent=(plan.profile, (plan.prompt_cap, plan.transcript_cap))
        )
        kept = self._kept(inp.ref.run_id)
        run = self._attempt_run(inp, kept, config, repo)
        journal = RunJournal(services, run)
        stop = StopToken()
        loop = Loop(name=inp.ref.loop, path=self.home.loops_dir, config=config)
        grace = services.config.limits.shutdown_grace.total_seconds()
        why = None
        result = None
        beat = Heartbeat(stop, journal, _every(inp.heartbeat_seconds), grace)
        since = marks(self.store, run.id)  # the desk's records this step adds travel home
        try:
            with beat.running():  # a new tree's `setup` may take a while
                tree = self._tree(journal, config, inp.remote, inp.head, kept, stop)
                self.store.save_run(run)
                self.store.mark_live(run.id)
                try:
                    parts = PromptParts(**plan.parts)
                    step = Attempt(
                        services, loop, journal, stop, tree, "", plan.n, parts=parts,
                        parked=inp.resume, engine_waits=True,
                    )  # fmt: skip
                    result = step.run()
                except RunStopped as stopped:
                    why = stopped.why
                record = run.attempts[-1]
                head = inp.head
                if result is None or not result.parked:  # a parked tree waits as it is
                    head = commit_attempt(journal, tree, record)
                    branches.push_tree(tree, inp.remote)
        except (TreeError, GitError, OSError, SandboxUnavailable) as exc:
            raise failure(exc) from None
        finally:
            run.agent_pids = []
            journal.save()
            self.store.unmark_live(run.id)
        self._raise_stopped(why)
        assert result is not None
        if result.checked is not None:
            self._checked[(run.id, plan.n)] = result.checked
        desk = carried(self.store, run.id, since, step.asked, plan.n)
        return self._attempt_output(run, record, head, result).model_copy(update={"desk": desk})

    def _attempt_run(
        self, inp: AttemptInput, kept: RunRecord | None, config: LoopConfig, repo: Path
    ) -> RunRecord:
        """The record the attempt goes on with: this machine's, when it resumes a park here;
        else a mirror of the home's."""
        plan = inp.plan
        if not inp.resume:
            return self._mirror(plan.record, config, repo)
        # Parked here: this machine's record, tree and agent HOME go on.
        if kept is None or kept.park is None or kept.park.attempt != plan.n:
            raise ApplicationError(
                f"the parked attempt {plan.n} of run {inp.ref.run_id} is not on worker "
                f"{self.identity}",
                type="Interrupted",
                non_retryable=True,
            )
        kept.pid = os.getpid()
        return kept

    def _raise_stopped(self, why: str | None) -> None:
        """The error of an attempt stopped by a person's cancel or by the worker's stop."""
        if why == "cancelled":
            raise CancelledError("cancelled by a person")
        if why == "interrupted":
            raise ApplicationError(
                f"the worker {self.identity} stopped during the attempt",
                type="Interrupted",
                non_retryable=True,
            )

    def _attempt_output(
        self, run: RunRecord, record: AttemptRecord, head: str, result: AttemptResult
    ) -> AttemptOutput:
        """The account of the attempt the workflow reads."""
        return AttemptOutput(
            record=record,
            head=head,
            start_error=result.start_error,
            over_budget=result.over_budget,
            tokens=run.tokens,
            input_tokens=run.input_tokens,
            output_tokens=run.output_tokens,
            cost_usd=run.cost_usd,
            worker=self.identity,
            own_queue=self.own_queue,
            sandbox=run.sandbox,
            quota_hold=result.quota_hold,
            park=run.park if result.parked else None,
            resume_at=run.resume_at if result.parked else None,
            quota_exceeded=result.quota_exceeded,
            login_refused=result.login_refused,
            gave_up=result.gave_up,
            environment=result.environment,
            rules_fired=list(run.rules_fired),
        )

    def _loop_here(
        self, ref: Any, config: dict, agent: tuple | None = None
    ) -> tuple[LoopConfig, RunServices, Path]:
        """The loop with this machine's repository, and the services for it."""
        cfg = LoopConfig.model_validate(config)
        try:
            repo = self.repo_for(ref.loop, cfg)
        except TreeError as exc:
            raise failure(exc) from None
        cfg = cfg.model_copy(update={"repo": str(repo)})
        services = self.services(cfg.agent, *agent) if agent else self.services()
        return cfg, services, repo

    def _kept(self, run_id: str) -> RunRecord | None:
        """This machine's record of the run, when an earlier step ran here."""
        try:
            return self.store.load_run(run_id)
        except (OSError, ValueError):
            return None

    def _tree(
        self,
        journal: RunJournal,
        cfg: LoopConfig,
        remote: str,
        head: str,
        kept: Any,
        stop: StopToken,
    ) -> RunTree:
        """The run's tree here at `head`, made as the local engine makes it, in the sandbox
        this machine gives its runs (a run refused here ends with its cause); in a new tree
        the loop's `setup` runs first (a failure ends the run with its log's tail)."""
        run = journal.run
        base = run.base_commit  # the run's base, as the home published it
        try:
            choose_sandbox(journal.services, journal)
            worktrees = journal.services.config.limits.worktrees_path
            tree, new = branches.open_tree(
                cfg.repo_path, remote, run.loop, run.id, head, worktrees,
                cfg.isolation, ledger_writer(journal), kept,
            )  # fmt: skip
            tree.sandbox = run.sandbox
            record_tree(run, tree)
            run.base_commit = base
            journal.save()
            setup = setup_tree(journal, stop, tree.path, tree.own, cfg) if new else None
        except RunStopped as stopped:
            raise _stopped(stopped) from None
        except (TreeError, GitError, OSError, SandboxUnavailable) as exc:
            raise failure(exc) from None
        if setup is not None and not setup.passed:
            reason = setup_failed_reason(run.id, setup, f" on worker {self.identity}")
            tail = setup_tail(self.store.run_dir(run.id))
            raise ApplicationError(reason, tail, type="SetupFailed", non_retryable=True)
        return tree

    @staticmethod
    def _close(tree: RunTree, remote: str, services: RunServices, ref: Any) -> None:
        """Remove the run's tree and scratch folder here: the next step may run elsewhere."""
        try:
            branches.close_tree(tree, remote)
        except (GitError, OSError):
            pass  # a tree left behind is removed when the run's branch is taken again
        worktrees = services.config.limits.worktrees_path
        remove_scratch(worktrees, ref.loop, ref.run_id)

    def _mirror(self, record: RunRecord, cfg: LoopConfig, repo: Path) -> RunRecord:
        """This machine's record of the run. What its agent may see is fixed again for each
        attempt: the tree and the scratch folder are removed after each attempt's checks."""
        run = record.model_copy(deep=True)
        run.repo, run.isolation, run.exposure = str(repo), cfg.isolation, None
        run.pid = os.getpid()
        return run

    # the checks ----------------------------------------------------------------------------
    @activity.defn(name="checks", no_thread_cancel_exception=True)
    def checks(self, inp: ChecksInput) -> ChecksOutput:
        """Checks, protected paths and refs of an attempt's commit; the evidence bundle."""
        config, services, repo = self._loop_here(inp.ref, inp.config)
        config = config.model_copy(update={"critic": "off"})  # the home asks the critic
        kept = self._kept(inp.ref.run_id)
        run = self._checks_record(inp, kept, config, repo)
        journal = RunJournal(services, run)
        attempt = run.attempts[-1]
        stop = StopToken()
        checked = self._checked.pop((run.id, inp.n), None)
        beat = Heartbeat(stop, journal, _every(inp.heartbeat_seconds), 0)
        beat.phase = "checks"
        try:
            with beat.running():
                tree = self._tree(journal, config, inp.remote, inp.head, kept, stop)
                judged = judge_attempt(
                    services, journal, stop, tree, config, attempt, inp.head, checked
                )
                texts = [v.text() for v in judged.violations]
                folder = journal.attempt_dir(attempt.n)
                bundle = build_evidence(
                    folder, config.task, attempt.summary, inp.evidence_tokens, texts
                )
                protected = [v.target for v in judged.violations if v.kind == "protected"]
                head = inp.head
                if protected:
                    restored = restore_paths(tree.git, run.base_commit, protected)
                    if restored is not None:
                        publish(journal, tree, restored)
                        branches.push_tree(tree, inp.remote)
                        head = restored
        except RunStopped as stopped:
            raise _stopped(stopped) from None
        except (TreeError, GitError, OSError, SandboxUnavailable) as exc:
            raise failure(exc) from None
        finally:
            journal.save()
        self._close(tree, inp.remote, services, inp.ref)
        return ChecksOutput(
            passed=judged.checks.passed,
            results=[
                {"command": r.command, "exit_code": r.exit_code} for r in judged.checks.results
            ],
            violations=judged.violations,
            log=_log_file(folder / "checks.log"),
            failed_tail=_read(folder / "checks-failed.txt"),
            diffstat=_read(folder / "diffstat.json"),
            evidence=bundle.render(),
            head=head,
            restored=protected,
            worker=self.identity,
            verified_tree=run.verified_tree if judged.checks.passed and not protected else "",
            base_tests=list(run.base_tests),
        )

    def _checks_record(
        self, inp: ChecksInput, kept: RunRecord | None, cfg: LoopConfig, repo: Path
    ) -> RunRecord:
        """The record the attempt left here; on another worker, the home's (no ref snapshot)."""
        if kept is not None and kept.attempts and kept.attempts[-1].n == inp.n:
            return kept
        run = self._mirror(inp.record, cfg, repo)
        run.refs_before = snapshot_refs(Git(repo))
        return run

    # the post-mortem --------------------------------------------------------------------------
    @activity.defn(name="post_mortem")
    def post_mortem(self, inp: LessonInput) -> LessonOutput:
        """One candidate rule from this machine's evidence of the attempt, grounded here."""
        folder = self.store.run_dir(inp.ref.run_id) / f"attempt-{inp.n}"
        if not is_stored(folder / "transcript.jsonl"):  # compressed when the attempt ended
            return LessonOutput(decision="none", error=f"no evidence of attempt {inp.n} here")
        own = self.config().daemon.verifier
        verifier = own if own.configured else VerifierConfig.model_validate(inp.verifier)
        try:
            run = self.store.load_run(inp.ref.run_id)
            summary = run.attempts[-1].summary if run.attempts else ""
        except (OSError, ValueError):
            summary = ""
        violations = [str(v) for v in inp.verdict.get("violations", [])]
        evidence = build_evidence(folder, inp.task, summary, verifier.evidence_tokens, violations)
        from daemon.engine.temporal.lessons import worker_lesson

        return worker_lesson(
            ModelClient(verifier), verifier, folder, self.store.root, evidence.render(),
            inp.verdict, inp.task, inp.ref.loop, inp.ref.run_id, inp.kind_hint, utc_now(),
        )  # fmt: skip

    # after a crash --------------------------------------------------------------------------
    def reap(self) -> list[str]:
        """Attempts a killed worker left: kill their processes, remove their trees."""
        from daemon.runs.finish import kill_run_leftovers

        services = self.services()
        reaped = []
        for run_id in self.store.live_runs():
            try:
                run = self.store.load_run(run_id)
            except (OSError, ValueError):
                self.store.unmark_live(run_id)
                continue
            kill_run_leftovers(services, run)
            if run.attempts and run.attempts[-1].finished is None:
                run.attempts[-1].interrupted = True
                run.attempts[-1].finished = services.clock()
            run.agent_pids = []
            self.store.save_run(run)
            if run.worktree and Path(run.worktree).exists():
                try:
                    tree = tree_of_record(run, services.config.limits.worktrees_path)
                    branches.close_tree(tree, "", keep_branch=True)
                except (GitError, OSError):
                    pass
            self.store.unmark_live(run_id)
            services.event(Event.ATTEMPT_REAPED, loop=run.loop, run=run.id, worker=self.identity)
            reaped.append(run_id)
        return reaped


def _stopped(stopped: RunStopped) -> BaseException:
    """A step stopped from outside: a person's cancel, or this worker stopping."""
    if stopped.why == "cancelled":
        return CancelledError("cancelled by a person")
    return ApplicationError("the worker stopped", type="Interrupted", non_retryable=True)


def _every(heartbeat_seconds: float) -> float:
    """How often to heartbeat: well within the timeout (the SDK sends at most every 0.8 of it)."""
    return max(0.2, min(5.0, heartbeat_seconds / 4))


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _log_file(path: Path) -> SparseFile:
    """checks.log for the home: whole when small, else the lines its excerpt keeps (the lines
    naming failures, the first failure, the end: daemon/excerpt.py) at their numbers."""
    lines = _read(path).split("\n")
    keep = kept_lines([line[:4000] + "\n" for line in lines], LOG_WHOLE)
    return SparseFile(
        name="checks.log", total=len(lines), lines={i + 1: lines[i][:4000] for i in keep}
    )
