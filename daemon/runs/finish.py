"""Finishing a run: one function, safe to run again after a crash anywhere inside it.

The outcome is saved first; then, each recorded in `finish_done` once done: a succeeded run
lands (landing/land.py), the tree is removed and an empty run branch deleted, the rules'
counters are updated, a succeeded run's recorded decisions proposed as rules, the escalation
is written (and its event), the progress notes rebuilt, a person notified, `run_finished`
recorded. Only then is the `live` marker removed, so a restart finds a half-finished run and
`complete_finish` does the rest.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from daemon.agents.homes import return_credentials
from daemon.config import Loop, LoopConfig
from daemon.git.agent import UnsafeTree
from daemon.git.safe import GitError
from daemon.git.tree import (
    RunTree,
    branch_name,
    check_folders,
    own_dir_for,
    remove_scratch,
    remove_tree,
    reopen_tree,
    tree_of_record,
)
from daemon.git.userrepo import UserRepo
from daemon.landing.branches import delete_if_empty
from daemon.landing.queue import land_queued
from daemon.people.escalation import supersede
from daemon.people.escalation_file import read_escalation
from daemon.people.escalation_repeat import digest_due
from daemon.people.escalation_repeat import escalate as file_escalation
from daemon.people.progress import update_progress
from daemon.processes import kill_leftovers, same_process
from daemon.rules.promotion import record_run
from daemon.rules.replay import breadth_reason
from daemon.runparts.journal import RunJournal
from daemon.runparts.services import RunServices
from daemon.runs.attempt import commit_attempt, end_interrupted
from daemon.runs.conflict import conflict_resolver
from daemon.runs.learning import learn_run_decisions, rule_attribution, rule_library
from daemon.state.eventtypes import Event
from daemon.state.holds import LoginHold, hold_login
from daemon.state.records import (
    JUDGED_OUTCOMES,
    STOPPED_OUTCOMES,
    AttemptRecord,
    Cause,
    Outcome,
    RunRecord,
    StallRecord,
    escalates,
    is_experiment,
)

# An outcome without a cause (a record from an older loopd, or a caller that gives none).
DEFAULT_CAUSE = {
    "succeeded": Cause.PASSED,
    "cancelled": Cause.CANCELLED,
    "interrupted": Cause.INTERRUPTED,
    "refused": Cause.REFUSED,
    "error": Cause.LOOPD_ERROR,
    "skipped": Cause.ALREADY_DONE,
}


def locate_worktree(services: RunServices, run: RunRecord) -> None:
    """Fill in a tree that a loopd killed before recording it: it is at its usual place."""
    if run.worktree or run.isolation == "in-place":
        return
    root = services.config.limits.worktrees_path
    guess = root / run.loop / run.id
    if guess.exists():
        run.worktree = str(guess)
        run.branch = run.branch or branch_name(run.loop, run.id)
        own = own_dir_for(root, run.loop, run.id)
        if own.exists() and not run.own_git_dir:
            run.own_git_dir = str(own)


def tree_of(services: RunServices, run: RunRecord) -> RunTree | None:
    """The run's tree as its record names it, when it is still there."""
    locate_worktree(services, run)
    if not run.worktree or not Path(run.worktree).exists():
        return None
    root = services.config.limits.worktrees_path
    try:
        if not run.own_git_dir or not Path(run.own_git_dir).exists():
            return reopen_tree(run, root)  # a record from before loopd's own git directory
        return tree_of_record(run, root)
    except (GitError, OSError) as exc:
        services.event(Event.TREE_UNUSABLE, loop=run.loop, run=run.id, error=str(exc)[:300])
        return None


def _close_open_attempt(
    journal: RunJournal,
    tree: RunTree | None,
    outcome: Outcome,
    reason: str,
    died_at: datetime | None = None,
) -> None:
    """The last attempt, cut short: commit what the agent left and record it as finished
    (an interrupted one with the stall that says why, however the run was stopped)."""
    run = journal.run
    if not run.attempts:
        return
    attempt = run.attempts[-1]
    if tree is not None and not attempt.head_commit:
        try:
            commit_attempt(journal, tree, attempt)
        except (GitError, OSError, UnsafeTree) as exc:
            journal.event(Event.COMMIT_FAILED, attempt=attempt.n, error=str(exc)[:300])
    elif not attempt.head_commit:
        # Its tree is elsewhere (a worker that was lost): the attempt got as far as the
        # run's branch holds, as the local engine would have committed it.
        attempt.head_commit = _branch_tip(run)
    if attempt.finished is None:
        at = died_at or journal.now()
        end_interrupted(journal, attempt, at, reason, stall=outcome == "interrupted")


def _branch_tip(run: RunRecord) -> str:
    """What the run's branch holds in the person's repository; "" when it cannot be read."""
    if not run.branch or not run.repo:
        return ""
    try:
        return UserRepo.locate(Path(run.repo)).ref(f"refs/heads/{run.branch}") or ""
    except (GitError, OSError):
        return ""


def finish_run(
    services: RunServices,
    run: RunRecord,
    outcome: Outcome,
    reason: str,
    cause: Cause | None = None,
    *,
    tree: RunTree | None = None,
    notify_on: Sequence[str] | None = None,
    config: LoopConfig | None = None,
    died_at: datetime | None = None,
) -> RunRecord:
    """Give the run its outcome (unless it has one) and finish it; see `complete_finish`.

    `died_at`: when a dead loopd's open attempt last did anything, its `finished`."""
    journal = RunJournal(services, run)
    if run.outcome is None:
        if outcome in STOPPED_OUTCOMES:
            _close_open_attempt(journal, tree, outcome, reason, died_at)
        run.outcome = outcome
        run.reason = reason
        run.cause = cause or DEFAULT_CAUSE.get(outcome)
        run.finished = journal.now()
        run.phase = "idle"
        run.agent_pids = []
        run.resume_at = None  # a parked run that is cancelled or escalated waits no more
        journal.save()
    return complete_finish(services, run, tree=tree, notify_on=notify_on, config=config)


class _Steps:
    """The steps of finishing a run, each done once: after a restart, those not done yet."""

    def __init__(self, journal: RunJournal) -> None:
        self.journal = journal

    def todo(self, name: str) -> bool:
        return name not in self.journal.run.finish_done

    def done(self, name: str) -> None:
        self.journal.run.finish_done.append(name)
        self.journal.save()


def _finish_work(
    services: RunServices, steps: _Steps, tree: RunTree | None, config: LoopConfig | None
) -> None:
    """Land the work, remove the tree, delete an empty branch, count the rules' effects."""
    journal, run = steps.journal, steps.journal.run
    if steps.todo("land"):
        # A textual conflict gets the run's one conflict attempt, in its tree (runs/conflict.py).
        resolve = None
        if config is not None:
            leftovers = partial(kill_run_leftovers, services, run)
            resolve = conflict_resolver(services, journal, tree, config, leftovers)
        land_queued(journal, config, resolve)
        steps.done("land")
    # The tree goes and an empty branch is deleted before anything is written for a person,
    # so nothing written offers a branch that is gone.
    if steps.todo("tree"):
        _remove_tree(services, journal, tree or tree_of(services, run))
        steps.done("tree")
    if steps.todo("branch"):
        delete_if_empty(journal)
        steps.done("branch")
    if steps.todo("counters"):
        _count_rules(services, run)
        steps.done("counters")
    if steps.todo("decisions"):
        # After the counters: a rule learned from this run has not fired in it.
        learn_run_decisions(services, run)
        steps.done("decisions")


def _finish_for_people(
    services: RunServices, steps: _Steps, notify_on: Sequence[str] | None, profile: str = ""
) -> None:
    """The escalation, superseded ones, progress notes, notifications and `run_finished`;
    `profile`: the loop's agent profile (a refused login holds it)."""
    journal, run = steps.journal, steps.journal.run
    # An experiment's run is read in its report: no escalation, no notification, and the
    # loop's progress notes stay as they were for the experiment's other runs.
    experiment = is_experiment(run)
    escalate = escalates(run.outcome, run.cause) and not experiment
    if steps.todo("escalation"):
        if escalate:
            _write_escalation(services, journal, profile)
        steps.done("escalation")
    if steps.todo("login_hold"):
        if run.cause == Cause.AGENT_LOGIN and profile:
            _hold_login(services, journal, profile)
        steps.done("login_hold")
    if steps.todo("escalated"):
        if escalate:
            _escalated_event(services, journal)
        steps.done("escalated")
    if steps.todo("supersede"):
        supersede(services.store, run, journal.now())
        steps.done("supersede")
    if steps.todo("progress"):
        if not experiment:
            update_progress(services.store, run.loop, journal.now())
        steps.done("progress")
    if steps.todo("notified"):
        if not experiment:
            _notify(services, run, escalate, notify_on)
        steps.done("notified")
    if steps.todo("event"):
        journal.event(
            Event.RUN_FINISHED,
            outcome=run.outcome,
            reason=run.reason,
            cause=str(run.cause or ""),
            tokens=run.tokens,
        )
        steps.done("event")


def complete_finish(
    services: RunServices,
    run: RunRecord,
    *,
    tree: RunTree | None = None,
    notify_on: Sequence[str] | None = None,
    config: LoopConfig | None = None,
) -> RunRecord:
    """The steps of finishing a run with an outcome that are not done yet, then unmark it live.

    `notify_on` is the loop's; None (the loop is gone) notifies escalations only. `config`
    is the loop's, for landing (its `setup`, checks and landing keys); None: a run that
    should land does not, and says why.
    """
    assert run.outcome is not None, "finishing needs an outcome"
    journal = RunJournal(services, run)
    if run.cause is None:
        run.cause = DEFAULT_CAUSE.get(run.outcome)
    steps = _Steps(journal)
    _finish_work(services, steps, tree, config)
    _finish_for_people(services, steps, notify_on, config.agent if config else "")
    services.store.clear_cancel(run.id)
    services.store.unmark_live(run.id)
    return run


def _return_credentials(journal: RunJournal) -> None:
    """Refreshed login tokens go back to the real HOME; nothing else of the agent's HOME does."""
    exposure = journal.run.exposure
    if exposure is None or not exposure.agent_home or not exposure.seeded:
        return
    try:
        returned = return_credentials(
            Path(exposure.agent_home), Path(exposure.real_home), exposure.seeded
        )
    except OSError as exc:
        journal.event(Event.CREDENTIALS_NOT_RETURNED, error=str(exc)[:300])
        return
    if returned:
        journal.event(Event.CREDENTIALS_RETURNED, paths=returned)


def _remove_tree(services: RunServices, journal: RunJournal, tree: RunTree | None) -> None:
    run = journal.run
    root = services.config.limits.worktrees_path
    _return_credentials(journal)
    remove_scratch(root, run.loop, run.id)
    if tree is None:
        # The tree is gone; loopd's git directory beside it goes too.
        own = Path(run.own_git_dir) if run.own_git_dir else own_dir_for(root, run.loop, run.id)
        if own.name.endswith(".git"):
            for path in (own, *check_folders(own)):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
        return
    try:
        remove_tree(tree)
    except (GitError, OSError) as exc:
        journal.event(Event.WORKTREE_REMOVE_FAILED, error=str(exc)[:300])


def _count_rules(services: RunServices, run: RunRecord) -> None:
    # Only runs whose agent worked count for or against their rules: a run refused or
    # escalated by a rule before any agent, or stopped by a person or a crash, says nothing.
    # An experiment's runs never count: an arm without a support is not the rules' doing.
    if not (run.rules_fired and run.attempts and run.outcome in JUDGED_OUTCOMES):
        return
    if is_experiment(run):
        return

    now = services.clock()
    max_breadth = services.config.rules.max_breadth
    record_run(
        rule_library(services),
        list(run.rules_fired),
        run.loop,
        run.task,
        run.outcome == "succeeded",
        services.store.events,
        now,
        state_root=services.store.root,
        run=run.id,
        attribution=rule_attribution(run),
        too_broad=lambda rule: breadth_reason(rule, services.store, now, max_breadth),
    )


def _write_escalation(services: RunServices, journal: RunJournal, profile: str = "") -> None:

    # Filed once: after a crash the file may be there already, perhaps resolved since; a
    # repeat of an open escalation's task counts in that one (escalate says which).
    journal.run.escalation, _ = file_escalation(services.store, journal.run, journal.now(), profile)
    journal.save()


def _hold_login(services: RunServices, journal: RunJournal, profile: str) -> None:
    """New runs of every loop using `profile` wait until `loopd check` finds its login works
    (an experiment's refused login holds them too: the credentials are the profile's)."""
    run = journal.run
    hold = LoginHold(
        since=journal.now(),
        run=run.id,
        loop=run.loop,
        message=run.reason[-300:],
        escalation=run.escalation,
    )
    hold_login(services.store, profile, hold)
    journal.event(Event.LOGIN_HELD, profile=profile)


def _escalated_event(services: RunServices, journal: RunJournal) -> None:
    run = journal.run
    held_by = run.escalation or run.id
    path = services.store.escalation_path(held_by)
    where = str(path.relative_to(services.store.root))
    repeat: dict[str, object] = {}
    if held_by != run.id:
        meta = read_escalation(path)
        repeat = {"repeat_of": held_by, "count": meta.count if meta else 0}
    journal.event(Event.ESCALATED, reason=run.reason, cause=str(run.cause), file=where, **repeat)


def _notify(
    services: RunServices, run: RunRecord, escalate: bool, notify_on: Sequence[str] | None
) -> None:
    notifications = services.notifications
    if notifications is None:
        return
    now = services.clock()
    if escalate and run.escalation and run.escalation != run.id:
        # A repeat: the person was told when it was filed; now at most a daily digest.

        meta = digest_due(services.store, run.escalation, now)
        if meta is not None:
            path = services.store.escalation_path(run.escalation)
            notifications.escalation_repeated(meta, path, now)
    elif escalate:
        notifications.escalated(run, services.store.escalation_path(run.id), now)
    elif notify_on is not None:
        notifications.run_finished(run, notify_on, now)


# -- runs ended outside an executor -----------------------------------------------------------


def end_without_agent(
    services: RunServices,
    run: RunRecord,
    outcome: Outcome,
    reason: str,
    cause: Cause | None = None,
    notify_on: Sequence[str] | None = None,
) -> RunRecord:
    """End a run that no executor will take further (cancelled in the queue, orphaned)."""
    return finish_run(
        services, run, outcome, reason, cause, tree=tree_of(services, run), notify_on=notify_on
    )


def kill_run_leftovers(services: RunServices, run: RunRecord, grace: float = 5.0) -> None:
    """Kill what a dead loopd's attempt left running: its process group, and processes
    started since the attempt began that work inside its worktree."""
    locate_worktree(services, run)
    started = run.attempts[-1].started.timestamp() if run.attempts else None
    # Only processes started since the attempt began: an in-place tree is the user's
    # repository, where an editor's helpers may be working.
    tree = Path(run.worktree) if run.worktree else None
    # A recorded group whose leader is no longer the process loopd started (a pid reused
    # since, another boot) is someone else's: left alone.
    groups = [pid for pid in run.agent_pids if same_process(pid, run.pid_marks.get(str(pid), ""))]
    kill_leftovers(groups, tree, grace, started_after=started)


def finish_interrupted(
    services: RunServices,
    loop: Loop,
    run: RunRecord,
    reason: str,
    cause: Cause = Cause.INTERRUPTED,
) -> RunRecord:
    """End a run that a dead loopd left mid-attempt: commit what is there, outcome interrupted.

    With `cause` interrupted-retry (a retry that was itself interrupted) it is escalated.
    """
    died_at = None
    for attempt in run.attempts:
        if attempt.finished is None:
            died_at = last_seen(services, run, attempt)
            attempt.stalls.append(StallRecord(kind="interrupted", at=died_at, detail=reason))
    return finish_run(
        services,
        run,
        "interrupted",
        reason,
        cause,
        tree=tree_of(services, run),
        notify_on=loop.config.notify_on,
        died_at=died_at,
    )


def last_seen(services: RunServices, run: RunRecord, attempt: AttemptRecord) -> datetime:
    """When a dead loopd's attempt last wrote anything (its folder's newest file), not the
    restart that finds it: no earlier than its start, no later than now."""
    now = services.clock()
    folder = services.store.attempt_dir(run.id, attempt.n)
    newest = attempt.started
    try:
        for path in folder.iterdir():
            stamp = datetime.fromtimestamp(path.lstat().st_mtime, UTC)
            newest = max(newest, stamp)
    except OSError:
        return now
    return min(newest, now)
