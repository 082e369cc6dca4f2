"""Checks: the loop's `done_when` commands, run by loopd in the run's tree after the agent.

A cancel or a shutdown reaches a running check through the run's StopToken: its whole
process group is killed and the run stops (RunStopped) instead of waiting for the check.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from io import BufferedReader
from pathlib import Path

from daemon.excerpt import NAMES_FAILURE, excerpt
from daemon.processes import claim, kill_tree, release, spawning
from daemon.redact import redact
from daemon.runparts.stop import StopToken
from daemon.runparts.testcounts import TestCounts
from daemon.sandbox.base import Launch
from daemon.state.atomic import write_atomic

TAIL_BYTES = 8000  # the failing checks' output the next attempt's prompt reads
HEAD_CAP = 256_000  # of a check's output, its first bytes are kept whatever follows
OUTPUT_CAP = 2_000_000  # per command, in checks.log: its last bytes
# A runner's timings ("1 error in 0.05s", "Ran 1 test in 0.000s", "(0.00s)", "Time: 1.2 s",
# "(0:00:12)"): never the same twice, so read as `{duration}` when outputs are compared.
_DURATION = re.compile(
    r"\b\d+\.\d+ ?(?:s|ms|sec|secs|seconds)\b(?: \(\d+:\d\d:\d\d\))?|\b\d+ ?ms\b"
)
NAMED_CAP = 256_000  # bytes of the lines naming failures kept from what falls between
STOP_POLL = 0.2  # seconds between looks at the stop token while a check runs
KILL_GRACE = 3.0  # seconds a killed check gets between SIGTERM and SIGKILL
LINK_OUT = "a symbolic link out of the check tree"


@dataclass
class CheckResult:
    command: str
    exit_code: int | None
    seconds: float
    timed_out: bool
    output: str
    tests: TestCounts | None = None  # what its test runner says it ran (clean check trees)
    changed: list[str] = field(default_factory=list)  # tracked files the check changed

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.changed


@dataclass
class ChecksResult:
    results: list[CheckResult] = field(default_factory=list)
    # Checks that test less than on the base (`testcounts.weakened`): (command, why).
    weakened: list[tuple[str, str]] = field(default_factory=list)
    # Symbolic links of the commit that lead out of the check tree (`treelinks.py`): (path,
    # target). The checks may have read through them what the branch does not hold.
    links_out: list[tuple[str, str]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results) and not self.weakened and not self.links_out

    def log(self) -> str:
        """The text of checks.log."""
        if not self.results:
            return "(no done_when checks)\n"
        parts = []
        for r in self.results:
            status = "timed out" if r.timed_out else f"exit {r.exit_code}"
            parts.append(f"$ {r.command}\n{r.output}")
            if not r.output.endswith("\n") and r.output:
                parts.append("\n")
            parts.append(f"[{status} after {r.seconds:.1f}s]\n\n")
        for command, why in self.weakened:
            parts.append(f"[loopd: `{command}` tests less than on the base: {why}]\n")
        parts += [f"[loopd: {LINK_OUT}: {path} -> {target}]\n" for path, target in self.links_out]
        return "".join(parts)

    def failure_tail(self, limit: int = TAIL_BYTES) -> str:
        """The output of the failing checks within `limit` characters, each an excerpt
        (daemon/excerpt.py: the lines naming failures, the first failure, the end)."""
        parts = [
            f"$ {command}   (tests less than on the base: {why})\n"
            for command, why in self.weakened
        ]
        parts += [f"{LINK_OUT}: {path} -> {target}\n" for path, target in self.links_out]
        failing = [r for r in self.results if not r.passed]
        heads = []
        for r in failing:
            status = "timed out" if r.timed_out else f"exit {r.exit_code}"
            if r.changed:
                status += f"; changed {', '.join(r.changed[:5])}"
            heads.append(f"$ {r.command}   ({status})\n")
        room = limit - sum(map(len, parts + heads)) - 2 * len(failing)
        share = max(0, room) // max(1, len(failing))
        for r, head in zip(failing, heads, strict=True):
            parts.append(f"{head}{excerpt(r.output, share).rstrip()}\n")
        return "\n".join(parts)


# Turns a check's command and environment into what to start (the run's sandbox).
Launcher = Callable[[str, Mapping[str, str]], Launch]


def output_digest(result: CheckResult, trees: Sequence[str] = ()) -> str:
    """What the base keeps of a failing check's output to tell it again (runs/sameoutput.py):
    its exit code's and output's sha256, the run's tree folders (`trees`, which differ from
    machine to machine) read as `{tree}` and its timings as `{duration}`; "" where it passed
    or timed out."""
    if result.passed or result.timed_out:
        return ""
    output = result.output
    for folder in sorted(trees, key=len, reverse=True):
        output = output.replace(folder, "{tree}")
    output = _DURATION.sub("{duration}", output)
    data = f"{result.exit_code}\0{output}".encode("utf-8", "surrogateescape")
    return hashlib.sha256(data).hexdigest()


def base_digests(checks: ChecksResult, trees: Sequence[str] = ()) -> list[str]:
    """Each check's `output_digest`, in `done_when`'s order."""
    return [output_digest(result, trees) for result in checks.results]


def _unconfined(command: str, env: Mapping[str, str]) -> Launch:
    return Launch(argv=["/bin/sh", "-c", command], env=dict(env))


def _kill_group(proc: subprocess.Popen[bytes], wrapped: bool) -> None:
    """SIGTERM the check's group and descendants, SIGKILL after a grace; reap what it left."""
    kill_tree(proc.pid, proc.pid, KILL_GRACE, wrapper=wrapped)
    try:
        proc.wait(timeout=KILL_GRACE)
    except subprocess.TimeoutExpired:
        pass


def run_check(
    command: str,
    cwd: Path,
    timeout: float,
    env: Mapping[str, str],
    stop: StopToken | None = None,
    launcher: Launcher | None = None,
) -> CheckResult:
    """Run one `done_when` command with /bin/sh -c in its own process group.

    Stopping the run kills the check's group; the caller learns it from the token.
    """
    started = time.monotonic()
    launch = (launcher or _unconfined)(command, env)
    try:
        # Claimed, so that a concurrent attempt's sweep for escaped processes leaves it alone.
        with spawning():
            proc = subprocess.Popen(
                launch.argv,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=launch.env,
                pass_fds=launch.pass_fds,
            )
            claim(proc.pid)
        launch.spawned()
        try:
            return _finish_check(proc, command, started, timeout, stop, launch.wrapped)
        finally:
            release(proc.pid)
    finally:
        launch.close()


class _Tail:
    """Reads a pipe to its end in a thread, keeping its first HEAD_CAP bytes, its last
    OUTPUT_CAP bytes and, of what falls between, the lines that name failures.

    A runner that prints megabytes after its first failure would otherwise leave only the
    end: the failing test is kept, at its place, with the size of what was cut around it.
    """

    def __init__(self, pipe: BufferedReader) -> None:
        self.head = bytearray()
        self.data = bytearray()
        self.dropped = 0
        self.named: list[bytes] = []  # lines naming failures among the dropped bytes
        self._named_bytes = 0
        self._partial = b""  # a dropped line's start whose end was dropped later
        self._pipe = pipe
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for chunk in iter(lambda: self._pipe.read1(65536), b""):
            room = HEAD_CAP - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            self.data += chunk
            if len(self.data) > OUTPUT_CAP:
                cut = len(self.data) - OUTPUT_CAP
                self._drop(bytes(self.data[:cut]))
                del self.data[:cut]

    def _drop(self, data: bytes) -> None:
        """Count dropped bytes; keep their lines that name failures, while NAMED_CAP lasts."""
        self.dropped += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()[-NAMED_CAP:]
        for line in lines:
            if self._named_bytes + len(line) > NAMED_CAP:
                continue
            if NAMES_FAILURE.search(line.decode("utf-8", "replace")):
                self.named.append(line)
                self._named_bytes += len(line) + 1

    def text(self, wait: float) -> str:
        self._thread.join(wait)
        first, last = bytes(self.head), bytes(self.data)
        if not self.dropped:
            return (first + last).decode("utf-8", "replace")
        # Whole lines either side of the cut: the partial ones count as cut.
        head_end, tail_start = first.rfind(b"\n") + 1, last.find(b"\n") + 1
        dropped = self.dropped + len(first) - head_end + tail_start
        head = first[:head_end].decode("utf-8", "replace")
        tail = last[tail_start:].decode("utf-8", "replace")
        cut = (
            f"[... {dropped} bytes of output cut here; "
            f"the {len(self.named)} lines among them that name failures follow ...]\n"
        )
        named = "".join(line.decode("utf-8", "replace") + "\n" for line in self.named)
        end = "[... the cut ends here ...]\n"
        return head + cut + named + end + tail


def _wait(
    proc: subprocess.Popen[bytes], timeout: float, stop: StopToken | None, wrapped: bool
) -> tuple[bool, bool]:
    """Wait for the check; (timed out, stopped). Either way its group is killed."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            proc.wait(timeout=max(0.0, min(left, STOP_POLL if stop is not None else left)))
            return False, False
        except subprocess.TimeoutExpired:
            pass
        if stop is not None and stop.stopped:
            _kill_group(proc, wrapped)
            return False, True
        if time.monotonic() >= deadline:
            _kill_group(proc, wrapped)
            return True, False


def _finish_check(
    proc: subprocess.Popen[bytes],
    command: str,
    started: float,
    timeout: float,
    stop: StopToken | None,
    wrapped: bool,
) -> CheckResult:
    assert isinstance(proc.stdout, BufferedReader)  # stdout=PIPE, binary and buffered (the default)
    tail = _Tail(proc.stdout)
    timed_out, stopped = _wait(proc, timeout, stop, wrapped)
    # The shell is gone; what it left in its group (holding the pipe open) goes too.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    text = tail.text(wait=5)
    if stopped:
        text += "\n[stopped: the run was cancelled or loopd is stopping]\n"
    return CheckResult(
        command=redact(command),
        exit_code=None if timed_out or stopped else proc.returncode,
        seconds=time.monotonic() - started,
        timed_out=timed_out,
        output=redact(text),
    )


def run_checks(
    commands: list[str],
    cwd: Path,
    timeout: float,
    env: Mapping[str, str],
    log_path: Path | None,
    stop: StopToken | None = None,
    *,
    launcher: Launcher | None = None,
) -> ChecksResult:
    """Run every check (all of them, for the whole picture) and write checks.log.

    Raises RunStopped, without writing checks.log, when the run stops meanwhile.
    """
    result = ChecksResult()
    for command in commands:
        result.results.append(run_check(command, cwd, timeout, env, stop, launcher))
        if stop is not None:
            stop.raise_if_stopped()
    if log_path is not None:
        write_atomic(log_path, result.log())
    return result
