"""What bounds one sandboxed process tree: processes, memory, temporary folders, file size.

Each launch gets a control group of its own where the host offers one loopd may write: a
cgroup v2 subtree delegated to loopd's own group (`pids` and `memory` in its
`cgroup.subtree_control`; or a group systemd delegated, `Delegate=` as `loopd systemd
install` writes, where loopd first moves itself into a leaf `loopd` and enables the two
controllers, as cgroup v2 wants no process beside child groups), else the cgroup v1 `pids`
and `memory` hierarchies (as on hosts that keep v1), else, under systemd, a transient scope
per launch (`systemd-run --scope -p TasksMax= -p MemoryMax=`). There `pids.max` bounds the
processes of the whole tree and the memory limit its resident memory together. Where none
of these can be used, rlimits stand in: RLIMIT_NPROC
(which the kernel does not apply to processes of the real root, so it bounds nothing when
loopd runs as root: `describe` says so) and RLIMIT_DATA per process. Every tmpfs the sandbox
mounts (its `/tmp`, the masks over homes) gets `--size`, and the agent's files RLIMIT_FSIZE.

The launch joins its groups through a small shell prefix before bubblewrap starts, so
nothing it forks escapes them; `Bounds.hit()` reads the groups' counters after the exit
(`pids.events` max, the memory group's `oom_kill`), and `release()` removes them.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from daemon.config import LimitsConfig
from daemon.units import format_size

CGROUP = Path("/sys/fs/cgroup")
SYSTEMD_RUNTIME = "/run/systemd/system"  # present when systemd is the init system
_serial = itertools.count()


@dataclass(frozen=True)
class RunLimits:
    """The limits of one run's processes (bytes; 0: none)."""

    processes: int = 1024
    memory: int = 8 << 30
    tmp: int = 1 << 30
    file_size: int = 0  # the agent's only: a check or setup may write a big wheel


def run_limits(limits: LimitsConfig) -> RunLimits:
    """The bounds of a run's processes, from `[limits]` in loopd.toml."""
    return RunLimits(
        processes=limits.max_processes,
        memory=limits.memory_limit,
        tmp=limits.max_tmp,
        file_size=limits.max_file_size,
    )


def _writable(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK)


def _own_group(hierarchy: str) -> str:
    """This process's group in a v1 hierarchy (or v2 with hierarchy ""), from /proc."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        _, names, path = (line.split(":", 2) + ["", ""])[:3]
        if (hierarchy and hierarchy in names.split(",")) or (not hierarchy and names == ""):
            return path
    return ""


@dataclass(frozen=True)
class Backend:
    """Where loopd makes a launch's groups: the parent folders, one per controller."""

    kind: str  # "cgroup2", "cgroup1", "systemd" or "rlimit"
    pids: Path | None = None
    memory: Path | None = None
    why: str = ""  # for rlimit: why no control group could be used


def _words(path: Path) -> set[str]:
    try:
        return set(path.read_text().split())
    except OSError:
        return set()


def _delegated(group: Path) -> bool:
    """Whether systemd delegated this group (its `trusted.delegate` or `user.delegate` mark)."""
    for name in ("trusted.delegate", "user.delegate"):
        try:
            if os.getxattr(group, name) == b"1":
                return True
        except OSError:
            continue
    return False


def _take_delegated(group: Path) -> bool:
    """Move this process into `group/loopd` and enable pids and memory for `group`'s children."""
    try:
        leaf = group / "loopd"
        leaf.mkdir(exist_ok=True)
        (leaf / "cgroup.procs").write_text(f"{os.getpid()}\n")
        (group / "cgroup.subtree_control").write_text("+pids +memory\n")
    except OSError:  # the kernel refuses a controller it cannot enable with an error
        return False
    return True


def _probe() -> Backend:
    v2 = CGROUP / _own_group("").lstrip("/") if (CGROUP / "cgroup.controllers").is_file() else None
    if v2 is not None and _writable(v2):
        if {"pids", "memory"} <= _words(v2 / "cgroup.subtree_control"):
            return Backend("cgroup2", v2, v2)
        offered = {"pids", "memory"} <= _words(v2 / "cgroup.controllers")
        if offered and _delegated(v2) and _take_delegated(v2):
            return Backend("cgroup2", v2, v2)
    pids = CGROUP / "pids" / _own_group("pids").lstrip("/")
    memory = CGROUP / "memory" / _own_group("memory").lstrip("/")
    if _writable(pids) and _writable(memory) and (memory / "memory.limit_in_bytes").exists():
        return Backend("cgroup1", pids, memory)
    if Path(SYSTEMD_RUNTIME).is_dir() and shutil.which("systemd-run"):
        return Backend("systemd")
    why = "no cgroup loopd may write here (v2 without a delegated pids and memory subtree, no v1)"
    return Backend("rlimit", why=why)


_backend: Backend | None = None


def backend() -> Backend:
    """How limits are enforced on this host (probed once per process)."""
    global _backend
    if _backend is None:
        _backend = _probe()
    return _backend


def describe(limits: RunLimits, is_root: bool | None = None) -> str:
    """One line for `check` and `status`: which limits are in force, and how."""
    root = os.geteuid() == 0 if is_root is None else is_root
    found = backend()
    memory = format_size(limits.memory)
    parts = [f"/tmp and masked folders {format_size(limits.tmp)} each (tmpfs size)"]
    if limits.file_size:
        parts.append(f"the agent's files {format_size(limits.file_size)} each (RLIMIT_FSIZE)")
    if found.kind != "rlimit":
        head = f"{limits.processes} processes, {memory} of memory per run ({found.kind})"
        return "limits: " + ", ".join([head, *parts])
    procs = (
        f"processes: not bounded (loopd runs as root, whose processes RLIMIT_NPROC does not "
        f"count; {found.why})"
        if root
        else f"{limits.processes} processes (RLIMIT_NPROC)"
    )
    return "limits: " + ", ".join([procs, f"{memory} per process (RLIMIT_DATA)", *parts])


@dataclass
class Bounds:
    """One launch's control groups: the shell prefix that joins them, counters, removal."""

    limits: RunLimits
    agent: bool = False
    groups: list[Path] = field(default_factory=list)
    scope: str = ""  # the transient systemd scope's unit, where systemd holds the launch

    @classmethod
    def make(cls, limits: RunLimits, agent: bool) -> Bounds:
        found = backend()
        bounds = cls(limits, agent)
        if found.kind == "systemd":
            bounds.scope = f"loopd-{os.getpid()}-{next(_serial)}.scope"
            return bounds
        if found.kind == "rlimit" or found.pids is None or found.memory is None:
            return bounds
        name = f"loopd-{os.getpid()}-{next(_serial)}"
        try:
            if found.kind == "cgroup2":
                group = found.pids / name
                group.mkdir()
                bounds.groups.append(group)
                (group / "pids.max").write_text(f"{limits.processes}\n")
                (group / "memory.max").write_text(f"{limits.memory}\n")
            else:
                pids, memory = found.pids / name, found.memory / name
                pids.mkdir()
                bounds.groups.append(pids)
                memory.mkdir()
                bounds.groups.append(memory)
                (pids / "pids.max").write_text(f"{limits.processes}\n")
                (memory / "memory.limit_in_bytes").write_text(f"{limits.memory}\n")
        except OSError:
            bounds.release()
            bounds.groups = []
        return bounds

    def prefix(self) -> list[str]:
        """What to start before bubblewrap: join the groups, set the rlimits, exec the rest."""
        joins = "".join(f'echo $$ > "{g}/cgroup.procs" && ' for g in self.groups)
        rlimits = []
        if shutil.which("prlimit"):
            rlimits = ["prlimit", f"--nproc={self.limits.processes}"]
            rlimits.append(f"--data={self.limits.memory}")
            if self.agent and self.limits.file_size:
                rlimits.append(f"--fsize={self.limits.file_size}")
            rlimits.append("--")
        scope = []
        if self.scope:
            scope = ["systemd-run", *_user_manager(), "--scope", "--quiet", f"--unit={self.scope}"]
            scope += ["-p", f"TasksMax={self.limits.processes}"]
            scope += ["-p", f"MemoryMax={self.limits.memory}", "--"]
        return ["/bin/sh", "-c", joins + 'exec "$@"', "loopd-limits", *scope, *rlimits]

    def hit(self) -> str:
        """The limit the tree ran into ("processes", "memory"), or ""."""
        if self.scope:
            # systemd records a scope's OOM kill as its result; TasksMax leaves no mark.
            return "memory" if self._systemctl("show", "--property=Result", "--value") else ""
        for group in self.groups:
            for name, key, what in (
                ("pids.events", "max", "processes"),
                ("memory.events", "oom_kill", "memory"),
                ("memory.oom_control", "oom_kill", "memory"),
            ):
                try:
                    text = (group / name).read_text()
                except OSError:
                    continue
                for line in text.splitlines():
                    words = line.split()
                    value = words[-1] if words else "0"
                    if words and words[0] == key and value.isdigit() and int(value) > 0:
                        return what
        return ""

    def _systemctl(self, *args: str) -> bool:
        """Run systemctl on the scope; whether it said `oom-kill`."""
        try:
            done = subprocess.run(
                ["systemctl", *_user_manager(), *args, self.scope],
                capture_output=True,
                text=True,
                timeout=10,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.SubprocessError):
            return False
        return done.stdout.strip() == "oom-kill"

    def release(self) -> None:
        """Remove the groups (empty once the tree is gone); safe to call again."""
        if self.scope:
            self._systemctl("reset-failed")  # a failed scope stays loaded until this
        for group in reversed(self.groups):
            try:
                group.rmdir()
            except OSError:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: alive
    return True


def sweep_stale_groups() -> list[Path]:
    """Remove the empty control groups a dead loopd left (killed with -9: no `release()`).

    Groups are named `loopd-PID-N` after the process that made them; one whose PID no longer
    runs belongs to a dead daemon, worker or `loopd once`. A group with processes still in it
    is left: recovery ends what a dead run left, and the next start removes the group. Called
    at start, after recovery; returns the groups removed.
    """
    found = backend()
    if found.kind not in ("cgroup2", "cgroup1"):
        return []  # systemd removes a transient scope once it is empty
    removed: list[Path] = []
    for parent in dict.fromkeys(p for p in (found.pids, found.memory) if p is not None):
        try:
            names = [entry.name for entry in os.scandir(parent) if entry.is_dir()]
        except OSError:
            continue
        for name in names:
            parts = name.split("-")
            if len(parts) != 3 or parts[0] != "loopd" or not parts[1].isdigit():
                continue
            pid = int(parts[1])
            if pid == os.getpid() or _alive(pid):
                continue
            try:
                (parent / name).rmdir()  # refused while a process is inside (EBUSY)
            except OSError:
                continue
            removed.append(parent / name)
    return removed


def _user_manager() -> list[str]:
    """`--user` where loopd is not root: the person's own systemd manager holds the scope."""
    return [] if os.geteuid() == 0 else ["--user"]
