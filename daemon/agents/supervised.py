"""One supervised process from its start to its cleanup: the loop that reads its output into
the transcript, samples its tree, watches for stalls and the timeout, and kills it
(daemon/agents/supervisor.py starts it and says what ends it)."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from daemon.agents.base import AgentEvent, Invocation
from daemon.agents.lines import READ_CHUNK, LineSplitter
from daemon.agents.results import ProcessResult, ToolCall
from daemon.agents.stalls import ARGUMENTS_KEPT, StallKind, StallWatcher
from daemon.processes import ProcessTree, kill_tree
from daemon.redact import redact, redact_value

if TYPE_CHECKING:
    from daemon.agents.base import AgentAdapter
    from daemon.agents.transcript import Transcript


# A Protocol, so this module does not import supervisor.py, which imports it.
class Owner(Protocol):
    """What a supervised process reads of the supervisor that started it (supervisor.py)."""

    adapter: AgentAdapter
    transcript: Transcript
    kill_grace: float
    on_event: Callable[[AgentEvent], None] | None
    clock: Callable[[], datetime]
    cwd: Path
    repeat_limit: int
    over_limit: Callable[[], str] | None
    _lock: threading.Lock
    _stop_at: float | None
    _stop_reason: str
    _wake_w: int | None


TAIL_KEPT = 20  # the last lines of output kept for a plain agent's quota message
TAIL_LINE_CHARS = 2000
TOOL_CALLS_KEPT = 500  # the result keeps the first calls; `tool_call_count` counts all
SAMPLE_EVERY = 0.5  # seconds between samples of the process tree (about 2 ms each)
LIMIT_EVERY = 5.0  # seconds between looks at what the agent's files count (`over_limit`)
DRAIN_AFTER_EXIT = 2.0  # seconds to read what is left in the pipes once the tree is gone
_EXIT_POLL = 0.1  # where pidfd_open is missing


class SupervisedRun:
    """The state of one supervised process, from its start to its cleanup."""

    def __init__(
        self,
        sup: Owner,
        proc: subprocess.Popen[bytes],
        tree: ProcessTree,
        invocation: Invocation,
        result: ProcessResult,
        timeout: float,
        stall_after: float,
        wrapped: bool = False,
    ) -> None:
        self.sup = sup
        self.wrapped = wrapped  # the root is the sandbox, not the agent
        self.last_stderr = ""
        self.proc = proc
        self.tree = tree
        self.result = result
        self.timeout_at = result.started + timeout if timeout and timeout > 0 else None
        self.stalls = StallWatcher(sup.cwd, stall_after, sup.repeat_limit)
        self.stdin_data = memoryview(invocation.stdin or b"")
        self.end_reason = "exited"
        self.killer: threading.Thread | None = None
        self.last_text = ""
        self.final_text: str | None = None
        self.tail: deque[str] = deque(maxlen=TAIL_KEPT)
        self.sel = selectors.DefaultSelector()
        self.splitters: dict[int, LineSplitter] = {}
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        with sup._lock:
            sup._wake_w = wake_w
        self.pidfd: int | None = None

    # -- the loop -------------------------------------------------------------------------

    def watch(self) -> None:
        proc = self.proc
        assert proc.stdout is not None and proc.stderr is not None
        for pipe, stream in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
            os.set_blocking(pipe.fileno(), False)
            self.splitters[pipe.fileno()] = LineSplitter(stream)
            self.sel.register(pipe.fileno(), selectors.EVENT_READ, "out")
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")
        if proc.stdin is not None:
            os.set_blocking(proc.stdin.fileno(), False)
            self.sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE, "in")
            if not self.stdin_data:
                self._close_stdin()
        try:
            self.pidfd = os.pidfd_open(proc.pid)
            self.sel.register(self.pidfd, selectors.EVENT_READ, "exit")
        except (AttributeError, OSError):
            self.pidfd = None
        next_sample = time.monotonic() + SAMPLE_EVERY
        next_limit = time.monotonic() + LIMIT_EVERY
        exit_seen_at: float | None = None
        tree_gone_at: float | None = None

        while True:
            now = time.monotonic()
            if exit_seen_at is None and proc.poll() is not None:
                exit_seen_at = now
                self.result.exit_code = proc.returncode
                self._start_kill(None)  # what the agent left running, if anything
            if exit_seen_at is not None and self.killer is not None and not self.killer.is_alive():
                # The tree is gone: read the pipes to their end, unless someone outside the
                # tree holds them open.
                tree_gone_at = now if tree_gone_at is None else tree_gone_at
                if not self.splitters or now - tree_gone_at > DRAIN_AFTER_EXIT:
                    break
            if self.killer is None:
                self._check_triggers(now)
                if self.killer is None and now >= next_sample:
                    self.tree.refresh()
                    next_sample = now + SAMPLE_EVERY
                if self.killer is None and self.sup.over_limit and now >= next_limit:
                    next_limit = now + LIMIT_EVERY
                    hit = self.sup.over_limit()
                    if hit:
                        self.result.limit_hit = hit
                        self._start_kill("limit")
            wait = self._next_wait(now, next_sample, exit_seen_at)
            for key, _ in self.sel.select(wait):
                if key.data == "out":
                    self._read(key.fd)
                elif key.data == "in":
                    self._write_stdin()
                elif key.data == "wake":
                    self._drain_wake()
                elif key.data == "exit":
                    self.sel.unregister(key.fd)

    def _next_wait(self, now: float, next_sample: float, exit_seen_at: float | None) -> float:
        if exit_seen_at is not None:
            return 0.05
        deadlines = [next_sample]
        if self.killer is None:
            if self.timeout_at is not None:
                deadlines.append(self.timeout_at)
            stall_at = self.stalls.deadline()
            if stall_at is not None:
                deadlines.append(stall_at)
            with self.sup._lock:
                if self.sup._stop_at is not None:
                    deadlines.append(self.sup._stop_at)
        wait = min(deadlines) - now
        if self.pidfd is None or self.killer is not None:
            wait = min(wait, _EXIT_POLL)
        return max(0.0, wait)

    def _check_triggers(self, now: float) -> None:
        with self.sup._lock:
            stop_at = self.sup._stop_at
        if self.stalls.pending is not None:
            self._stall(self.stalls.pending)
        elif stop_at is not None and now >= stop_at:
            self.sup.transcript.write_loopd(
                self.sup.clock(), "process", event="stopping", reason=self.sup._stop_reason
            )
            self._start_kill("stopped")
        elif self.timeout_at is not None and now >= self.timeout_at:
            self.result.timed_out = True
            self.sup.transcript.write_loopd(
                self.sup.clock(),
                "process",
                event="timeout",
                after_seconds=round(now - self.result.started, 3),
            )
            self._start_kill("timeout")
        elif self.stalls.silent(now):
            self._stall("silence")

    def _stall(self, kind: StallKind) -> None:
        self.result.stall = kind
        self.sup.transcript.write_loopd(self.sup.clock(), "stall", **self.stalls.details(kind))
        self._start_kill("stall")

    def _limit_reached(self) -> None:
        """End an agent that would retry its usage limit for long: its own ending, not loopd's
        (not `killed`), so the limit is read as if it had given up at once."""
        if self.killer is None:
            self.sup.transcript.write_loopd(
                self.sup.clock(), "process", event="stopping", reason="usage limit"
            )
            self._start_kill(None)
            self.end_reason = "usage limit"

    def _start_kill(self, reason: str | None) -> None:
        if self.killer is not None:
            return
        if reason is not None:
            self.end_reason = reason
            self.result.killed = True
        self.killer = threading.Thread(
            target=kill_tree,
            args=(self.proc.pid, self.proc.pid, self.sup.kill_grace),
            kwargs={"tree": self.tree, "wrapper": self.wrapped},
            name=f"kill-{self.proc.pid}",
            daemon=True,
        )
        self.killer.start()

    # -- streams --------------------------------------------------------------------------

    def _read(self, fd: int) -> None:
        splitter = self.splitters[fd]
        try:
            data = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.sel.unregister(fd)
            del self.splitters[fd]
            lines = splitter.finish()
        else:
            self.result.output_bytes += len(data)
            self.stalls.activity()
            lines = splitter.feed(data)
        for line in lines:
            self._line(splitter.stream, line)

    def _line(self, stream: str, data: bytes) -> None:
        if data.endswith(b"\r"):
            data = data[:-1]
        text = data.decode("utf-8", "replace")
        now = self.sup.clock()
        self.tail.append(text[:TAIL_LINE_CHARS])
        if stream == "stderr":
            self.last_stderr = text[:500]
            self.result.events += 1
            self.sup.transcript.write_line(now, stream, text, [AgentEvent(type="raw", text=text)])
            return
        try:
            events = self.sup.adapter.parse_line(text)
        except Exception:  # an adapter bug must not end the attempt
            events = [AgentEvent(type="raw", text=text)]
        self.sup.transcript.write_line(now, stream, text, events)
        for event in events:
            self.result.events += 1
            if event.type != "raw":
                self.result.stream_events += 1
            self._account(event)
            if self.sup.on_event is not None:
                self.sup.on_event(event)

    def _account(self, event: AgentEvent) -> None:
        result = self.result
        if event.session_id:
            result.session_id = redact(event.session_id)
        if event.type == "text" and event.text:
            self.last_text = event.text
        elif event.type == "final":
            self.final_text = event.text
            result.final_ok = not event.is_error
            if event.is_error and event.text:
                result.last_error = redact(event.text)
        elif event.type == "error":
            result.last_error = redact(event.text)
            result.final_ok = None  # the session's last word is this error, until a final
            result.quota_hint = result.quota_hint or event.quota
            result.reset_at = event.reset_at or result.reset_at
            result.login_hint = result.login_hint or event.login
            if event.quota and self.sup.adapter.stop_at_limit:
                self._limit_reached()
        elif event.type == "tool_result":
            result.denied = result.denied or event.denied
        elif event.type == "usage":
            result.input_tokens += event.input_tokens
            result.output_tokens += event.output_tokens
            result.cost_usd += event.cost_usd
        elif event.type == "tool_call":
            self._tool_call(event)

    def _tool_call(self, event: AgentEvent) -> None:
        result = self.result
        result.tool_call_count += 1
        arguments = json.dumps(event.arguments, sort_keys=True, default=str)
        if len(result.tool_calls) < TOOL_CALLS_KEPT:
            kept = (
                event.arguments if len(arguments) <= ARGUMENTS_KEPT else arguments[:ARGUMENTS_KEPT]
            )
            result.tool_calls.append(ToolCall(tool=event.tool, arguments=redact_value(kept)))
        self.stalls.tool_call(event.tool, arguments)

    def _write_stdin(self) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            written = os.write(stdin.fileno(), self.stdin_data[:READ_CHUNK])
            self.stdin_data = self.stdin_data[written:]
        except BlockingIOError:
            return
        except OSError:  # the agent closed its stdin: it does not want the rest
            self.stdin_data = memoryview(b"")
        if not self.stdin_data:
            self._close_stdin()

    def _close_stdin(self) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.closed:
            return
        try:
            self.sel.unregister(stdin.fileno())
        except (KeyError, ValueError):
            pass
        try:
            stdin.close()
        except OSError:
            pass

    def _drain_wake(self) -> None:
        try:
            while os.read(self.wake_r, 512):
                pass
        except OSError:
            pass

    # -- the end --------------------------------------------------------------------------

    def cleanup(self) -> None:
        """Kill whatever is left, reap the root, close every descriptor."""
        try:
            if self.killer is not None:
                self.killer.join()
            if self.proc.poll() is None or self.killer is None:
                kill_tree(
                    self.proc.pid,
                    self.proc.pid,
                    self.sup.kill_grace,
                    tree=self.tree,
                    wrapper=self.wrapped,
                )
            self.proc.wait()
            if self.result.exit_code is None:
                self.result.exit_code = self.proc.returncode
            self._flush_partial_lines()
            self.result.tail = [redact(line) for line in self.tail]
            if self.final_text is not None:
                self.result.final_text = redact(self.final_text)
            else:
                self.result.final_text = redact(self.last_text)
        finally:
            with self.sup._lock:
                wake_w, self.sup._wake_w = self.sup._wake_w, None
            for fd in (self.wake_r, wake_w, self.pidfd):
                if fd is not None:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            self.sel.close()
            for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if pipe is not None:
                    try:
                        pipe.close()
                    except OSError:
                        pass

    def _flush_partial_lines(self) -> None:
        for splitter in list(self.splitters.values()):
            for line in splitter.finish():
                self._line(splitter.stream, line)
        self.splitters.clear()
