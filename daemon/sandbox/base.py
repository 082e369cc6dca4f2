"""The sandbox interface: a command, and what it may see and write in, turned into what to start."""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from daemon.sandbox.limits import Bounds, RunLimits


@dataclass(frozen=True)
class Exposure:
    """What a sandboxed process may see and write in, beyond a read-only view of the system.

    `hidden` is never visible, whatever else is bound (loopd's home): a path of `readable` or
    `writable` inside it is left out. `denied` (the deny list: a home's keys and tokens) is the
    same, masked only where something would show it. `tools` are read-only like `readable`
    but shown even inside `hidden`: a program's virtual environment in a checkout that is
    loopd's home (never beside anything of the deny list).
    """

    cwd: Path
    writable: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    network: bool = True
    denied: tuple[Path, ...] = ()
    tools: tuple[Path, ...] = ()
    limits: RunLimits | None = None  # processes, memory, tmpfs and file sizes (limits.py)
    agent: bool = False  # the agent's launch (its files are bounded too), not a check
    # The command waits, its sandbox made, until `Launch.release()` (sandboxes that `gate`).
    gated: bool = False

    def adding(
        self,
        readable: Iterable[Path] = (),
        writable: Iterable[Path] = (),
        tools: Iterable[Path] = (),
    ) -> Exposure:
        """The same exposure with more paths (a program's installation, what setup made)."""
        return replace(
            self,
            readable=self.readable + tuple(readable),
            writable=self.writable + tuple(writable),
            tools=self.tools + tuple(tools),
        )


@dataclass
class Availability:
    """Whether a sandbox can run here, and what it said when it cannot."""

    ok: bool
    detail: str = ""  # a version when it works, the reason when it does not


@dataclass
class Launch:
    """What to start: argv and environment, and the sandbox's report on its command.

    Start it with `pass_fds=launch.pass_fds`, call `spawned()` right after, and after the
    process has exited `command_ran()` tells a sandbox that failed to set up (a missing
    program, a mount it could not make) from a command that ran and exited. A gated launch
    (`gate_fd`) sets its sandbox up and waits there, before the command starts, until
    `release()`: what must be done before the command runs overlaps the sandbox's set-up.
    """

    argv: list[str]
    env: dict[str, str]
    pass_fds: tuple[int, ...] = ()
    status_fd: int | None = None  # read end of the sandbox's status pipe
    bounds: Bounds | None = None  # the launch's control groups and rlimits
    gate_fd: int | None = None  # write end of the pipe the sandbox waits on (a gated launch)
    limit_hit: str = ""  # after close(): the limit the tree ran into ("processes", "memory")
    _records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def wrapped(self) -> bool:
        """The command runs below a sandbox process (argv[0] is the sandbox's program)."""
        return self.status_fd is not None

    def spawned(self) -> None:
        """Close this process's copies of what only the child needs."""
        for fd in self.pass_fds:
            _close(fd)
        self.pass_fds = ()

    def release(self) -> None:
        """Let a gated command start (nothing for one that is not gated)."""
        fd, self.gate_fd = self.gate_fd, None
        if fd is not None:
            try:
                os.write(fd, b"\n")
            finally:
                _close(fd)

    def command_ran(self) -> bool:
        """After the exit: whether the command itself started (always True unsandboxed)."""
        if self.status_fd is None:
            return True
        self._read_status()
        return any("exit-code" in record for record in self._records)

    def close(self) -> None:
        """Release the status pipe and the control groups; safe to call more than once.
        A gate still closed is closed without a word (the process is gone by now)."""
        self.spawned()
        if self.gate_fd is not None:
            _close(self.gate_fd)
            self.gate_fd = None
        if self.bounds is not None:
            self.limit_hit = self.limit_hit or self.bounds.hit()
            self.bounds.release()
        if self.status_fd is not None:
            self._read_status()
            _close(self.status_fd)
            self.status_fd = -1  # wrapped still, but nothing more to read

    def _read_status(self) -> None:
        if self.status_fd is None or self.status_fd < 0:
            return
        chunks = []
        os.set_blocking(self.status_fd, False)
        while True:
            try:
                chunk = os.read(self.status_fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        text = b"".join(chunks).decode("utf-8", "replace")
        decoder = json.JSONDecoder()
        at = 0
        while at < len(text):
            while at < len(text) and text[at].isspace():
                at += 1
            if at >= len(text):
                break
            try:
                value, at = decoder.raw_decode(text, at)
            except ValueError:
                break
            if isinstance(value, dict):
                self._records.append(value)


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


class Sandbox(ABC):
    """One way of confining a process; `launch` is all a caller needs."""

    name: ClassVar[str]
    confines: ClassVar[bool]  # False: the process sees and writes what loopd's user can

    @classmethod
    @abstractmethod
    def availability(cls) -> Availability:
        """Whether it can run on this machine (cached for the process's life)."""

    @classmethod
    def gates(cls) -> bool:
        """Whether a launch with `exposure.gated` waits, set up, for `Launch.release()`."""
        return False

    @abstractmethod
    def launch(self, argv: list[str], env: Mapping[str, str], exposure: Exposure) -> Launch:
        """The argv and environment that run `argv` with `env`, confined to `exposure`."""
