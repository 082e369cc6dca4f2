"""Before a run's first attempt, on a worker of the loop's queue: `setup` in a new tree at the
commit the run starts from, then (for `skip_if_done`) `done_when` there, judged for a failure
of the environment's (`runs/envprobe.py`), as the local engine judges it.

The tree is removed afterwards, since the first attempt may run on another machine; every
tree a worker makes for an attempt, or for checks elsewhere, runs `setup` again
(WorkerSide._tree). The logs stay in this machine's `state/runs/RUN_ID/` (setup.log,
done-check.log); the home gets their tails.
"""

from __future__ import annotations

from typing import Any

from temporalio import activity

from daemon.engine.temporal.models import SetupInput, SetupOutput
from daemon.engine.temporal.workerside import (
    Heartbeat,
    WorkerSide,
    _every,
    _stopped,
    failure,
)
from daemon.git.safe import GitError
from daemon.git.tree import TreeError
from daemon.runparts.checktree import done_already
from daemon.runparts.confinement import SandboxUnavailable
from daemon.runparts.journal import RunJournal
from daemon.runparts.setup import DONE_LOG, setup_tail
from daemon.runparts.stop import RunStopped, StopToken
from daemon.runs.envprobe import base_failure
from daemon.state.eventtypes import Event


class SetupStep:
    """The `setup` activity of one worker."""

    def __init__(self, side: WorkerSide) -> None:
        self.side = side

    def activities(self) -> list[Any]:
        return [self.setup]

    @activity.defn(name="setup", no_thread_cancel_exception=True)
    def setup(self, inp: SetupInput) -> SetupOutput:
        """`setup` in a new tree at the run's start, then (`skip_if_done`) `done_when` there."""
        side = self.side
        config, services, repo = side._loop_here(inp.ref, inp.config)
        run = side._mirror(inp.record, config, repo)
        journal = RunJournal(services, run)
        stop = StopToken()
        beat = Heartbeat(stop, journal, _every(inp.heartbeat_seconds), 0)
        beat.phase = "setup"
        folder = side.store.run_dir(run.id)
        tree = None
        out = SetupOutput(worker=side.identity)
        try:
            with beat.running():
                tree = side._tree(journal, config, inp.remote, inp.head, None, stop)
                if config.setup:
                    out.setup_log = setup_tail(folder)
                if inp.check_done:
                    checks = done_already(journal, stop, tree, config)
                    out.done_checked, out.done_passed = True, checks.passed
                    out.results = [
                        {"command": r.command, "exit_code": r.exit_code} for r in checks.results
                    ]
                    out.done_log = setup_tail(folder, name=DONE_LOG)
                    out.base_tests = list(journal.run.base_tests)
                    out.base_failures = list(journal.run.base_failures)
                    broken = base_failure(journal, tree.path, config, checks)
                    out.environment = broken.reason() if broken is not None else ""
                    journal.event(Event.DONE_CHECK, passed=checks.passed, commit=inp.head)
        except RunStopped as stopped:
            raise _stopped(stopped) from None
        except (TreeError, GitError, OSError, SandboxUnavailable) as exc:
            raise failure(exc) from None
        finally:
            journal.save()
            if tree is not None:
                side._close(tree, inp.remote, services, inp.ref)
        return out
