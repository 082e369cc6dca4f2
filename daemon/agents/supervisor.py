"""The supervisor: runs one agent process, streams it into the transcript, watches it, kills it.

One `run()` starts one process (argv, never a shell) in its own session and process group,
stdin at /dev/null or the invocation's bytes then EOF, and reads stdout and stderr together
through a selector in chunks, so memory stays bounded however much the agent prints: a line
longer than `MAX_LINE` is cut into pieces, and the transcript stops at its cap.

The process tree is killed (SIGTERM to the group and every descendant, SIGKILL after
`kill_grace`) on any of:
- `timeout` seconds after the start;
- a silence stall: no output and no file change in `cwd` for `stall_after` seconds (see
  `daemon.agents.stalls`);
- a repeated tool call: the same tool with the same arguments `repeat_limit` (3) times in a
  row;
- `stop(grace, reason)` from another thread: the process may finish for `grace` seconds.
When the agent's root process exits by itself, whatever it left running is killed too. When
`run()` returns, no process of the tree is left and no zombie of it remains.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from daemon.agents.base import AgentAdapter, AgentEvent, Invocation
from daemon.agents.environment import is_forbidden
from daemon.agents.lines import MAX_LINE
from daemon.agents.results import ProcessResult, ToolCall
from daemon.agents.stalls import REPEAT_LIMIT
from daemon.agents.supervised import SupervisedRun
from daemon.agents.transcript import Transcript
from daemon.clock import utc_now
from daemon.processes import ProcessTree, kill_tree, set_child_subreaper, spawning
from daemon.redact import redact
from daemon.sandbox.base import Launch
from daemon.state.atomic import ensure_dir

__all__ = ["MAX_LINE", "ProcessResult", "Supervisor", "ToolCall"]


class Supervisor:
    """Runs an agent's processes one at a time for one attempt; `stop()` from any thread."""

    def __init__(
        self,
        adapter: AgentAdapter,
        transcript: Transcript,
        cwd: Path,
        env: dict[str, str],
        *,
        kill_grace: float = 5.0,
        on_start: Callable[[int], None] | None = None,
        before_start: Callable[[], None] | None = None,
        on_event: Callable[[AgentEvent], None] | None = None,
        clock: Callable[[], datetime] = utc_now,
        repeat_limit: int = REPEAT_LIMIT,
        launcher: Callable[[list[str], dict[str, str]], Launch] | None = None,
        over_limit: Callable[[], str] | None = None,
    ) -> None:
        self.adapter = adapter
        # Turns argv and environment into what to start: the run's sandbox (None: as they are).
        self.launcher = launcher
        self.transcript = transcript
        self.cwd = Path(cwd)
        self.env = dict(env)
        self.kill_grace = kill_grace
        self.on_start = on_start  # called with the process's pid once its command runs
        # Called once the process is started, before a gated launch's command may run.
        self.before_start = before_start
        self.on_event = on_event
        # Asked every few seconds while the agent runs: a run limit its files are over ("" when
        # none); the session is ended at once when one is (its scratch folder on disk).
        self.over_limit = over_limit
        self.clock = clock
        self.repeat_limit = repeat_limit
        self._lock = threading.Lock()
        self._stop_at: float | None = None
        self._stop_reason = ""
        self._wake_w: int | None = None

    # -- control from other threads -------------------------------------------------------

    def stop(self, grace: float, reason: str) -> None:
        """End the running process after `grace` seconds (0: now); later runs do not start."""
        with self._lock:
            at = time.monotonic() + max(0.0, grace)
            if self._stop_at is None or at < self._stop_at:
                self._stop_at = at
            if not self._stop_reason:
                self._stop_reason = reason
            if self._wake_w is not None:
                try:
                    os.write(self._wake_w, b"x")
                except OSError:
                    pass

    # -- one process ----------------------------------------------------------------------

    def run(self, invocation: Invocation, *, timeout: float, stall_after: float) -> ProcessResult:
        """Run one process to its end; see the module docstring for what ends it."""
        set_child_subreaper()
        result = ProcessResult(started=time.monotonic())
        self._note_stop(result)
        if result.stopped:
            self.transcript.write_loopd(
                self.clock(), "process", event="not_started", reason=result.stop_reason
            )
            result.finished = time.monotonic()
            return result
        spawned = self._spawn(invocation, result)
        if spawned is None:
            return result
        proc, tree, launch = spawned
        result.pid = proc.pid
        run = self._watch(proc, tree, launch, invocation, result, timeout, stall_after)
        self._note_stop(result)
        self.transcript.write_loopd(
            self.clock(),
            "process",
            event="exited",
            pid=proc.pid,
            exit_code=result.exit_code,
            reason=run.end_reason,
            seconds=round(result.duration, 3),
        )
        return result

    def _note_stop(self, result: ProcessResult) -> None:
        """Mark the result stopped when `stop()` was called."""
        with self._lock:
            if self._stop_at is not None:
                result.stopped, result.stop_reason = True, self._stop_reason

    def _spawn(
        self, invocation: Invocation, result: ProcessResult
    ) -> tuple[subprocess.Popen[bytes], ProcessTree, Launch] | None:
        """Start the process in its own session, registered as a tree; None (the error in
        `result`) when it cannot start."""
        env = {k: v for k, v in {**self.env, **invocation.env}.items() if not is_forbidden(k)}
        if invocation.home is not None:
            ensure_dir(Path(invocation.home))
        launch: Launch | None = None
        try:
            launch = (self.launcher or Launch)(list(invocation.argv), env)
            with spawning():
                proc = subprocess.Popen(
                    launch.argv,
                    stdin=subprocess.PIPE if invocation.stdin is not None else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=self.cwd,
                    env=launch.env,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=launch.pass_fds,
                )
                tree = ProcessTree(root=proc.pid, cwd=self.cwd.resolve())
                tree.register()
            launch.spawned()
        except (OSError, ValueError) as exc:
            if launch is not None:
                launch.close()
            result.error = redact(f"could not start {invocation.argv[:1]}: {exc}")
            self.transcript.write_loopd(self.clock(), "process", event="failed", error=result.error)
            result.finished = time.monotonic()
            return None
        return proc, tree, launch

    def _watch(
        self,
        proc: subprocess.Popen[bytes],
        tree: ProcessTree,
        launch: Launch,
        invocation: Invocation,
        result: ProcessResult,
        timeout: float,
        stall_after: float,
    ) -> SupervisedRun:
        """Watch the started process to its end, then clean up after it and its tree."""
        try:
            run = SupervisedRun(
                self, proc, tree, invocation, result, timeout, stall_after, launch.wrapped
            )
        except BaseException:
            kill_tree(proc.pid, proc.pid, self.kill_grace, tree=tree, wrapper=launch.wrapped)
            proc.wait()
            tree.unregister()
            launch.close()
            raise
        try:
            self.transcript.write_loopd(
                self.clock(),
                "process",
                event="started",
                pid=proc.pid,
                argv=shlex.join(invocation.argv)[:2000],
                stdin="prompt" if invocation.stdin is not None else "/dev/null",
            )
            if self.before_start is not None:
                self.before_start()
            launch.release()  # a gated sandbox, set up meanwhile, starts the command now
            if self.on_start is not None:
                self.on_start(proc.pid)
            run.watch()
        finally:
            run.cleanup()
            tree.unregister()
            result.finished = time.monotonic()
            if not launch.command_ran():
                # bubblewrap itself failed (a missing program, a mount it could not make).
                why = run.last_stderr or f"exit {result.exit_code}"
                result.error = redact(f"could not start {invocation.argv[:1]}: {why}")
            launch.close()
            result.limit_hit = launch.limit_hit or result.limit_hit
        return run
