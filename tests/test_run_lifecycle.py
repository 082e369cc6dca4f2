"""The run lifecycle at its edges, in process: resume, stop, crash while finishing, recovery.

Real git repositories, real agent and check processes, the scripted model server; a tiny
judging retry policy is injected through RunServices.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from daemon.config import Loop
from daemon.git import safe as git_module
from daemon.git.tree import prepare_tree, record_tree
from daemon.git.userrepo import LedgerWriter
from daemon.home import Home
from daemon.processes import snapshot
from daemon.retry import RetryPolicy
from daemon.rules.library import RuleLibrary
from daemon.rules.rulefile import Rule
from daemon.runparts.services import RunServices
from daemon.runs.executor import RunExecutor, end_without_agent, new_run
from daemon.runs.finish import complete_finish, finish_run
from daemon.runs.recovery import recover_run
from daemon.scheduling.queue import PendingRun
from daemon.state.ledger import ledger_of
from daemon.state.records import AttemptRecord, Cause, RunRecord, Trigger
from tests.helpers import git, make_home, make_repo, processes_with, unique_token, wait_for
from tests.model_server import ScriptedModelServer, call_name

BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5, f'add(2, 3) gave {add(2, 3)}'\n",
}
TASK = "Make check.py pass: add in calc.py returns the wrong sum."
# Prints what it saw and leaves a note, never fixing anything: the checks keep failing.
IDLE_AGENT = "import pathlib\npathlib.Path('notes.txt').write_text('looked\\n')\nprint('done')\n"
RULE_TEXT = "Read `check.py` before editing calc.py."
JOIN = 120  # seconds a test waits for a run thread before calling it hung


@dataclass
class Case:
    home: Home
    repo: Path
    services: RunServices
    loop: Loop

    @property
    def store(self) -> Any:
        return self.services.store

    def events(self, run_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.store.events.read()
            if e.get("run") == run_id and (kind is None or e["type"] == kind)
        ]

    def pending(self, kind: str = "manual", **fields: Any) -> PendingRun:
        now = datetime.now(UTC)
        trigger = Trigger(loop="calc", kind=kind, reason="test", ts=now, **fields)  # type: ignore[arg-type]
        return PendingRun(
            id=self.store.new_run_id("calc", now), loop="calc", trigger=trigger, queued_at=now
        )

    def new_run(self, kind: str = "manual", **fields: Any) -> RunRecord:
        return new_run(self.services, self.loop, self.pending(kind, **fields))


def writer(case: Case, run: RunRecord) -> LedgerWriter:
    return LedgerWriter(ledger_of(case.store.root), case.services.clock, run.id)


def make_case(
    tmp_path: Path,
    agent: str = IDLE_AGENT,
    server: ScriptedModelServer | None = None,
    pending_limit: str = "600s",
    **loop: Any,
) -> Case:
    repo = make_repo(tmp_path / "repo", BUGGY)
    argv = [sys.executable, "-c", agent]
    config = f'[agents.a]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'
    if server is not None:
        config = (
            f'[verifier]\nbase_url = "{server.base_url}"\nmodel = "critic"\n'
            'timeout = "5s"\njudge_timeout = "5s"\n'
            f'pending_limit = "{pending_limit}"\n\n' + config
        )
    settings: dict[str, Any] = {
        "repo": str(repo),
        "task": TASK,
        "agent": "a",
        "done_when": ["python3 check.py"],
        "attempt_timeout": "120s",
        "stall_after": "60s",
        "max_nudges": 0,
        "max_attempts": 1,
        **loop,
    }
    text = "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())
    home = Home(make_home(tmp_path / "home", config, {"calc": text}))
    loaded = home.load()
    assert not loaded.errors, loaded.errors
    services = RunServices(
        home=home,
        config=loaded.daemon,
        store=home.state(),
        judging_retry=RetryPolicy(first=0.05, cap=0.05),
    )
    return Case(home, repo, services, loaded.loops["calc"])


def in_thread(executor: RunExecutor) -> threading.Thread:
    thread = threading.Thread(target=executor.execute, daemon=True)
    thread.start()
    return thread


def group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs (a zombie does not)."""
    table = snapshot()
    return any(info.pgid == pgid and info.state != "Z" for info in table.values())


# -- resume ------------------------------------------------------------------------------


def test_after_a_restart_mid_judging_later_prompts_keep_the_runs_rules(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    def reply(body: dict[str, Any]) -> Any:
        name = call_name(body)
        if name == "critic_verdict":
            return {
                "json": {
                    "score": 2,
                    "verdict": "No.",
                    "unsupported_claims": [],
                    "feedback": "Fix add.",
                }
            }
        if name == "trigger_matches":
            return {"json": {"matches": []}}
        return {"status": 503, "message": "down for this call"}

    model_server.script(reply)
    case = make_case(tmp_path, server=model_server, max_attempts=2)
    rule = RuleLibrary(case.home.rules_dir).add(
        Rule(
            rule=RULE_TEXT,
            why="A person decided so.",
            how_to_apply="Open it first.",
            trigger_patterns=[r"(?i)\bcheck\.py\b"],
        ),
        "active",
    )
    model_server.down = "refuse"
    run = case.new_run()
    first = RunExecutor(case.services, case.loop, run)
    thread = in_thread(first)
    wait_for(lambda: case.events(run.id, "verifier_unavailable"), timeout=60)
    first.interrupt(0)  # the daemon stops while the run waits for its verifier
    thread.join(JOIN)
    assert not thread.is_alive()
    stopped = case.store.load_run(run.id)
    assert stopped.phase == "judging" and stopped.outcome is None
    assert stopped.rules_fired == [rule.rule.id]

    model_server.down = None
    resumed = RunExecutor(case.services, case.loop, case.store.load_run(run.id)).execute()
    assert resumed.outcome == "escalated" and len(resumed.attempts) == 2
    prompt = (case.store.run_dir(run.id) / "attempt-2" / "prompt.md").read_text()
    assert "# Rules from earlier runs" in prompt and RULE_TEXT in prompt


def test_a_verifier_that_stays_down_past_pending_limit_is_an_exception_judging_raises(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    from daemon.runparts.journal import RunJournal
    from daemon.runparts.stop import StopToken
    from daemon.runs.judging import VerifierGaveUp, judge_attempt

    model_server.down = "refuse"
    case = make_case(tmp_path, server=model_server, pending_limit="1s")
    run = case.new_run()
    limits = case.services.config.limits
    tree = prepare_tree(
        case.repo, "calc", run.id, "worktree", "HEAD", limits.worktrees_path, writer(case, run)
    )
    record_tree(run, tree)
    now = datetime.now(UTC)
    attempt = AttemptRecord(n=1, started=now, finished=now, base_commit=tree.base_commit)
    run.attempts, run.judging_since = [attempt], now
    journal = RunJournal(case.services, run)
    with pytest.raises(VerifierGaveUp) as caught:
        judge_attempt(
            case.services, journal, StopToken(), tree, case.loop.config, attempt, tree.base_commit
        )
    assert caught.value.limit_seconds == 1 and "pending_limit 1s" in str(caught.value)
    # Judging only reports: the run is not ended behind the executor's back.
    assert run.outcome is None and run.id in case.store.live_runs()
    assert attempt.checks_passed is False and case.events(run.id, "verifier_unavailable")


# -- stopping reaches a running check ----------------------------------------------------------


@pytest.mark.parametrize("how", ["cancel", "cancel file", "daemon stop"])
def test_cancel_and_stop_kill_a_running_check_with_its_group(tmp_path: Path, how: str) -> None:
    # The check runs sandboxed: it tells that it started through a file in its tree, and its
    # processes are found by a token in their command lines (their pids are the sandbox's).
    token = unique_token("check", tmp_path)
    sleeper = f"python3 -c 'import time; time.sleep(600)' {token}"
    check = f"echo started > started; {sleeper} & wait"
    # skip_if_done off: the check to stop is the one after the attempt, in phase judging (the
    # one before the agent would be stopped in preparing, which ends the run interrupted).
    case = make_case(tmp_path, done_when=[check], skip_if_done=False)
    run = case.new_run()
    executor = RunExecutor(case.services, case.loop, run)
    thread = in_thread(executor)
    # The checks run in the run's check tree, a clean tree of the attempt's commit.
    started = tmp_path / "worktrees" / "calc" / f"{run.id}.check" / "started"
    wait_for(started.exists, timeout=60)
    wait_for(lambda: processes_with(token), timeout=10)
    if how == "cancel":
        executor.cancel()
    elif how == "cancel file":
        case.store.request_cancel(run.id)
    else:
        executor.interrupt(30)
    thread.join(JOIN)
    assert not thread.is_alive(), "the run waited for its check"
    assert not processes_with(token), "the check's processes were left running"
    ended = case.store.load_run(run.id)
    if how == "daemon stop":
        # Judging resumes after the restart: the run stays live, its tree kept.
        assert ended.outcome is None and ended.phase == "judging"
        assert run.id in case.store.live_runs() and Path(ended.worktree).is_dir()
    else:
        assert ended.outcome == "cancelled" and ended.cause == Cause.CANCELLED
        assert run.id not in case.store.live_runs()


# -- git that hangs ------------------------------------------------------------------------


def test_a_git_timeout_ends_the_run_as_an_error_with_its_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = make_case(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "git"
    wrapper.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do [ "$a" = commit-tree ] && exec sleep 60; done\n'
        f'exec {shutil.which("git")} "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(git_module, "TIMEOUT", 1.0)
    run = case.new_run()
    ended = RunExecutor(case.services, case.loop, run).execute()
    assert ended.outcome == "error" and ended.cause == Cause.GIT_FAILED
    assert "timed out" in ended.reason
    assert case.store.escalation_path(run.id).is_file()
    assert run.id not in case.store.live_runs()
    assert case.events(run.id, "run_finished")


# -- finishing is resumable ----------------------------------------------------------------


def escalated_run(case: Case) -> RunRecord:
    run = case.new_run()
    now = datetime.now(UTC)
    run.attempts = [AttemptRecord(n=1, started=now, finished=now, checks_passed=False, score=3)]
    run.phase = "learning"
    case.store.save_run(run)
    return run


def test_a_crash_between_the_outcome_and_the_escalation_is_completed_by_recovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import daemon.runs.finish as finish_module

    case = make_case(tmp_path)
    run = escalated_run(case)

    def crash(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("killed here")

    with monkeypatch.context() as patch:
        patch.setattr(finish_module, "file_escalation", crash)  # where finish_run calls it
        with pytest.raises(RuntimeError):
            finish_run(case.services, run, "escalated", "attempts used up", Cause.CHECKS_FAILED)
    on_disk = case.store.load_run(run.id)
    assert on_disk.outcome == "escalated" and run.id in case.store.live_runs()
    assert not case.store.escalation_path(run.id).exists()

    recovery = recover_run(case.services, {"calc": case.loop}, run.id, datetime.now(UTC))
    assert recovery.action == "ended"
    text = case.store.escalation_path(run.id).read_text()
    assert 'cause = "checks-failed"' in text
    assert run.id not in case.store.live_runs()
    # Running it again duplicates nothing.
    complete_finish(case.services, case.store.load_run(run.id))
    types = [e["type"] for e in case.events(run.id)]
    assert types.count("escalated") == 1 and types.count("run_finished") == 1


def test_a_live_run_toml_with_an_outcome_and_no_escalation_gets_one(tmp_path: Path) -> None:
    """The state a crash leaves, written by hand: no record of the finishing steps."""
    case = make_case(tmp_path)
    run = escalated_run(case)
    run.outcome = "escalated"
    run.reason = "attempts used up; checks still fail after 1 attempts"
    case.store.save_run(run)
    recover_run(case.services, {"calc": case.loop}, run.id, datetime.now(UTC))
    assert case.store.escalation_path(run.id).is_file()
    assert [e["type"] for e in case.events(run.id)].count("escalated") == 1
    assert run.id not in case.store.live_runs()


# -- runs ended without an agent --------------------------------------------------------------


@pytest.mark.parametrize("recorded", [True, False])
def test_end_without_agent_removes_the_runs_worktree(tmp_path: Path, recorded: bool) -> None:
    case = make_case(tmp_path, isolation="worktree")
    run = case.new_run()
    limits = case.services.config.limits
    tree = prepare_tree(
        case.repo, "calc", run.id, "worktree", "HEAD", limits.worktrees_path, writer(case, run)
    )
    if recorded:
        record_tree(run, tree)
        case.store.save_run(run)
    end_without_agent(case.services, run, "cancelled", "cancelled while queued")
    assert not tree.path.exists() and not tree.own.path.exists()
    assert str(tree.path) not in git(case.repo, "worktree", "list")
    assert run.outcome == "cancelled" and run.id not in case.store.live_runs()


# -- interrupted runs and retries ----------------------------------------------------------


def mid_attempt(case: Case, kind: str) -> RunRecord:
    run = case.new_run(kind, retry_of="20260101T000000Z-calc-0000" if kind == "retry" else "")
    run.attempts = [AttemptRecord(n=1, started=datetime.now(UTC))]
    run.phase = "running"
    case.store.save_run(run)
    return run


def test_an_interrupted_retry_is_escalated_and_its_attempt_finished(tmp_path: Path) -> None:
    case = make_case(tmp_path)
    run = mid_attempt(case, "retry")
    recovery = recover_run(case.services, {"calc": case.loop}, run.id, datetime.now(UTC))
    assert recovery.action == "ended" and recovery.retry_trigger is None
    ended = case.store.load_run(run.id)
    assert ended.outcome == "interrupted" and ended.cause == Cause.INTERRUPTED_RETRY
    text = case.store.escalation_path(run.id).read_text()
    assert 'cause = "interrupted-retry"' in text and "during its retry" in text
    (finished,) = case.events(run.id, "attempt_finished")
    assert finished["attempt"] == 1 and finished["interrupted"] is True
    assert case.events(run.id, "escalated")


def test_an_interrupted_first_run_is_retried_without_an_escalation(tmp_path: Path) -> None:
    case = make_case(tmp_path)
    run = mid_attempt(case, "manual")
    recovery = recover_run(case.services, {"calc": case.loop}, run.id, datetime.now(UTC))
    assert recovery.action == "retry" and recovery.retry_trigger is not None
    assert not case.store.escalation_path(run.id).exists()
    (finished,) = case.events(run.id, "attempt_finished")
    assert finished["interrupted"] is True


def test_a_retry_stopped_by_the_daemon_mid_attempt_is_escalated(tmp_path: Path) -> None:
    agent = "import time\nprint('working', flush=True)\ntime.sleep(600)\n"
    case = make_case(tmp_path, agent)
    run = case.new_run("retry", retry_of="20260101T000000Z-calc-0000")
    executor = RunExecutor(case.services, case.loop, run)
    thread = in_thread(executor)
    wait_for(lambda: case.events(run.id, "attempt_started"), timeout=60)
    wait_for(lambda: case.store.load_run(run.id).agent_pids, timeout=60)
    executor.interrupt(0)
    thread.join(JOIN)
    assert not thread.is_alive()
    assert run.outcome == "interrupted" and run.cause == Cause.INTERRUPTED_RETRY
    assert case.store.escalation_path(run.id).is_file()
    (finished,) = case.events(run.id, "attempt_finished")
    assert finished["interrupted"] is True


# -- recovery never raises ------------------------------------------------------------------


def test_one_broken_run_does_not_stop_the_recovery_of_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import daemon.runs.finish as finish

    case = make_case(tmp_path)
    broken, fine = mid_attempt(case, "manual"), mid_attempt(case, "manual")
    unreadable = case.new_run()
    (case.store.run_dir(unreadable.id) / "run.toml").write_bytes(b'id = "\xff"\n')
    real: Callable[..., Any] = finish.kill_run_leftovers

    def kill(services: Any, run: RunRecord, grace: float = 5.0) -> None:
        if run.id == broken.id:
            raise OSError("cannot read /proc")
        real(services, run, grace)

    monkeypatch.setattr(finish, "kill_run_leftovers", kill)
    loops = {"calc": case.loop}
    now = datetime.now(UTC)
    decisions = {r: recover_run(case.services, loops, r, now) for r in case.store.live_runs()}
    assert decisions[broken.id].action == "ended"
    assert decisions[unreadable.id].action == "ended"
    assert decisions[fine.id].action == "retry"
    assert case.store.live_runs() == []
    failed = [e["run"] for e in case.store.events.read() if e["type"] == "run_recovery_failed"]
    assert sorted(failed) == sorted([broken.id, unreadable.id])
    assert case.store.load_run(broken.id).outcome == "error"


def test_the_records_made_durable_behind_are_so_before_the_tree_and_the_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new run's record is fsynced on a thread of its own, the attempt's while bubblewrap
    sets up: each is durable before what a restart must not find without it (the run's tree
    and branch; the agent running). The fsyncs are slowed so that an early step shows."""
    import time

    from daemon.runs import executor as executor_module
    from daemon.sandbox.base import Launch
    from daemon.sandbox.bwrap import BwrapSandbox
    from daemon.state import store as store_module

    case = make_case(tmp_path)
    synced: list[bool] = []
    real_dirs, real_write = store_module.fsync_dirs, store_module.write_atomic

    def slow_dirs(paths: Any) -> None:
        time.sleep(0.5)
        real_dirs(paths)
        synced.append(True)

    def slow_write(path: Path, text: str, **kwargs: Any) -> None:
        if 'phase = "running"' in text:  # the attempt's record, saved behind
            time.sleep(0.5)
        real_write(path, text, **kwargs)

    monkeypatch.setattr(store_module, "fsync_dirs", slow_dirs)
    monkeypatch.setattr(store_module, "write_atomic", slow_write)
    run = new_run(case.services, case.loop, case.pending(), behind=True)
    at_tree: list[bool] = []
    real_prepare = executor_module.prepare_tree

    def prepare(*args: Any, **kwargs: Any) -> Any:
        at_tree.append(bool(synced))
        return real_prepare(*args, **kwargs)

    at_release: list[str] = []
    real_release = Launch.release

    def release(self: Launch) -> None:
        if self.gate_fd is not None:
            at_release.append(case.store.load_run(run.id).phase)
        real_release(self)

    monkeypatch.setattr(executor_module, "prepare_tree", prepare)
    monkeypatch.setattr(Launch, "release", release)
    ended = RunExecutor(case.services, case.loop, run).execute()
    assert ended.sandbox == "bwrap" and BwrapSandbox.gates()
    assert len(ended.attempts) == 1 and ended.outcome is not None
    assert at_tree == [True]
    assert at_release == ["running"]


def test_a_crash_after_the_tree_before_the_attempt_is_retried_and_the_tree_cleared(
    tmp_path: Path,
) -> None:
    """Without setup or a done check, the record is not saved between the tree and the
    attempt: a loopd killed there leaves a `preparing` record that names no tree. Recovery
    finds the tree at its usual place, clears it and retries the run."""
    from daemon.git.tree import locate_user

    case = make_case(tmp_path, skip_if_done=False)
    run = new_run(case.services, case.loop, case.pending(), behind=True)
    executor = RunExecutor(case.services, case.loop, run)
    executor._sandbox()
    tree = executor._make_tree(locate_user(case.repo))  # then loopd dies
    on_disk = case.store.load_run(run.id)
    assert on_disk.phase == "preparing" and on_disk.worktree == ""
    assert tree.path.is_dir() and run.id in case.store.live_runs()

    recovery = recover_run(case.services, {"calc": case.loop}, run.id, datetime.now(UTC))
    assert recovery.action == "retry" and recovery.retry_trigger is not None
    assert recovery.retry_trigger.retry_of == run.id
    ended = case.store.load_run(run.id)
    assert ended.outcome == "interrupted" and ended.worktree == str(tree.path)
    assert not tree.path.exists() and run.id not in case.store.live_runs()
    assert tree.own_dir is not None and not tree.own_dir.exists()  # loopd's git dir too
