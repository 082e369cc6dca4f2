"""Agent process trees on Linux: finding every descendant through /proc, killing, reaping.

An agent starts as the leader of its own session and process group, and loopd is a child
subreaper, so a descendant whose parent dies is reparented to loopd instead of init. A
process belongs to an agent's tree when any of these holds:
- it descends from the agent's root (ppid chains read from /proc), or was seen doing so
  (`ProcessTree.refresh` samples the tree while the agent runs; pid and start time);
- it is in the agent's session or process group;
- it is a direct child of loopd (reparented) that is not in loopd's own session, not a
  claimed process (`claim`), not another tree's root, member or session, that started
  after the agent's root and whose cwd is inside the agent's tree.
An escaped process that left the tree's folder before a sample saw it (a daemon that
double-forks and chdirs to / within `SAMPLE_EVERY`) is not found; loopd's own children
(git, checks, notifications), which sit in loopd's session, in another tree, or are
claimed, are never mistaken for an agent's.

Zombies are reaped with waitpid on their own pids only: waitpid(-1) would steal the exit
status of children that subprocess.Popen objects in other threads are waiting for.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
_POLL = 0.02
_KILL_WAIT = 5.0  # after SIGKILL, how long to wait for the kernel to finish the processes

_subreaper_lock = threading.Lock()
_subreaper_for_pid = 0

# Held while a child is started and registered, so that no kill sees it half-way.
_registry_lock = threading.RLock()
_active_trees: dict[int, ProcessTree] = {}  # root pid -> tree, while its agent runs
_claimed: set[int] = set()


@dataclass(frozen=True)
class ProcInfo:
    """One line of /proc/PID/stat, the fields we use."""

    pid: int
    state: str
    ppid: int
    pgid: int
    sid: int
    tty: int
    start: int  # clock ticks after boot


def set_child_subreaper() -> bool:
    """Make this process the child subreaper (once per process); False where unsupported."""
    global _subreaper_for_pid
    with _subreaper_lock:
        if _subreaper_for_pid == os.getpid():
            return True
        if not sys.platform.startswith("linux"):
            return False
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            return False
        _subreaper_for_pid = os.getpid()
        return True


def set_not_dumpable() -> bool:
    """PR_SET_DUMPABLE 0: a process of the same user without privileges cannot read this
    process's memory or /proc/PID/environ (loopd's secrets), nor attach to it; no core dumps.
    Children get it back at exec. False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def spawning() -> threading.RLock:
    """Hold this around starting a child and `claim`ing or registering it."""
    return _registry_lock


def claim(pid: int) -> None:
    """Mark a child started in its own session by other loopd code as not an agent's."""
    with _registry_lock:
        _claimed.add(pid)


def release(pid: int) -> None:
    """Undo `claim` once the child has been waited for."""
    with _registry_lock:
        _claimed.discard(pid)


def proc_info(pid: int) -> ProcInfo | None:
    """The stat of one process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    # The command name is in parentheses and may itself hold spaces and parentheses.
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return ProcInfo(
            pid=pid,
            state=fields[0].decode(),
            ppid=int(fields[1]),
            pgid=int(fields[2]),
            sid=int(fields[3]),
            tty=int(fields[4]),
            start=int(fields[19]),
        )
    except (IndexError, ValueError):
        return None


def snapshot() -> dict[int, ProcInfo]:
    """Every process visible in /proc."""
    table: dict[int, ProcInfo] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            info = proc_info(int(name))
            if info is not None:
                table[info.pid] = info
    return table


def _children_map(table: dict[int, ProcInfo]) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info.pid)
    return children


def _closure(roots: Iterable[int], table: dict[int, ProcInfo]) -> set[int]:
    children = _children_map(table)
    found: set[int] = set()
    stack = [pid for pid in roots if pid in table]
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found.add(pid)
        stack.extend(children.get(pid, ()))
    return found


def descendants(pid: int, table: dict[int, ProcInfo] | None = None) -> set[int]:
    """The processes below `pid` (not `pid` itself), by their parent links in /proc."""
    table = snapshot() if table is None else table
    return _closure([pid], table) - {pid}


def process_cwd(pid: int) -> str | None:
    """Where a process works, or None when it cannot be read."""
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None
    return cwd.removesuffix(" (deleted)")


def _inside(path: str | None, tree: str) -> bool:
    return path is not None and (path == tree or path.startswith(tree.rstrip("/") + "/"))


def _gone(info: ProcInfo | None) -> bool:
    return info is None or info.state in ("Z", "X", "x")


def _ancestors() -> set[int]:
    found, pid = set(), os.getpid()
    while pid > 1:
        found.add(pid)
        info = proc_info(pid)
        if info is None:
            break
        pid = info.ppid
    return found


@dataclass
class ProcessTree:
    """An agent's processes: its root (session and group leader) and every member seen."""

    root: int
    cwd: Path | None = None
    root_start: int = 0
    members: dict[int, int] = field(default_factory=dict)  # pid -> start ticks

    def __post_init__(self) -> None:
        info = proc_info(self.root)
        if info is not None and not self.root_start:
            self.root_start = info.start

    @property
    def session(self) -> int:
        return self.root  # started with start_new_session: session id = group id = root pid

    def register(self) -> None:
        """Let other trees' kills know these processes are not theirs."""
        with _registry_lock:
            _active_trees[self.root] = self

    def unregister(self) -> None:
        with _registry_lock:
            _active_trees.pop(self.root, None)

    def refresh(self, table: dict[int, ProcInfo] | None = None) -> None:
        """Record every process now in the tree, so that it is found after it escapes."""
        table = snapshot() if table is None else table
        self.remember(self.find(table), table)

    def remember(self, pids: Iterable[int], table: dict[int, ProcInfo]) -> None:
        with _registry_lock:
            for pid in pids:
                self.members.setdefault(pid, table[pid].start)

    def find(self, table: dict[int, ProcInfo]) -> set[int]:
        """The tree's processes in `table`, by every rule of the module docstring."""
        me, my_sid = os.getpid(), os.getsid(0)
        with _registry_lock:
            others = [tree for tree in _active_trees.values() if tree is not self]
            claimed = set(_claimed)
            other_members = {pid for tree in others for pid in tree.members}
            own_members = dict(self.members)
        other_roots = {tree.root for tree in others}
        other_sessions = {tree.session for tree in others}

        roots = {self.root}
        roots.update(
            pid for pid, start in own_members.items() if pid in table and table[pid].start == start
        )
        roots.update(
            info.pid
            for info in table.values()
            if info.sid == self.session or info.pgid == self.session
        )
        for info in table.values():
            if (
                info.ppid != me
                or info.sid == my_sid
                or info.pid in claimed
                or info.pid in other_roots
                or info.pid in other_members
                or info.sid in other_sessions
                or info.pgid in other_sessions
                or info.start < self.root_start
            ):
                continue
            # loopd's own children (checks, notifications) may also sit in their own session;
            # an escaped agent process is told apart by working in the agent's tree.
            if self.cwd is None or not _inside(process_cwd(info.pid), str(self.cwd)):
                continue
            roots.add(info.pid)
        found = _closure(roots, table)
        found.discard(me)
        return found - claimed - other_roots


def _signal_all(pids: Iterable[int], sig: signal.Signals, table: dict[int, ProcInfo]) -> None:
    for pid in pids:
        if not _gone(table.get(pid)):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def _reap(pids: Iterable[int], table: dict[int, ProcInfo], spare: int) -> None:
    """waitpid on each zombie among `pids` that is our child, except `spare` (Popen's)."""
    me = os.getpid()
    for pid in pids:
        info = table.get(pid)
        if pid != spare and info is not None and info.state == "Z" and info.ppid == me:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def _killpg(pgid: int, sig: signal.Signals) -> None:
    if pgid > 1:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _terminate(
    find: Callable[[dict[int, ProcInfo]], set[int]],
    pgids: Iterable[int],
    grace: float,
    spare: int,
    kill_only: frozenset[int] = frozenset(),
) -> set[int]:
    """SIGTERM, up to `grace` seconds, SIGKILL; then reap what became our zombies.

    `kill_only`: processes (and groups) that get no SIGTERM, only the SIGKILL after the grace.
    """
    signalled: set[int] = set()
    alive: set[int] = set()
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, _KILL_WAIT)):
        spared = kill_only if sig == signal.SIGTERM else frozenset()
        for pgid in pgids:
            if pgid not in spared:
                _killpg(pgid, sig)
        deadline = time.monotonic() + wait
        sent: set[int] = set()
        while True:
            table = snapshot()
            members = find(table)
            _reap(members, table, spare=spare)
            alive = {pid for pid in members if not _gone(table.get(pid))}
            # A process forked during the grace gets the signal too.
            _signal_all(alive - sent - spared, sig, table)
            sent |= alive
            signalled |= alive
            if not alive or time.monotonic() >= deadline:
                break
            time.sleep(_POLL)
        if not alive:
            break
    # Children of killed parents are reparented to us a moment after their parents die.
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        table = snapshot()
        members = find(table) | {pid for pid in signalled if pid in table}
        zombies = {pid for pid in members if pid != spare and table[pid].state == "Z"}
        if not zombies and all(_gone(table.get(pid)) for pid in members):
            break
        _reap(zombies, table, spare=spare)
        time.sleep(_POLL)
    return signalled


def kill_tree(
    root_pid: int,
    pgid: int,
    grace: float,
    *,
    tree: ProcessTree | None = None,
    wrapper: bool = False,
) -> set[int]:
    """SIGTERM the group and every process of the tree, SIGKILL what remains after `grace`.

    Reaps every reparented zombie of the tree; the root itself is left to its Popen. Returns
    the pids that were signalled. `wrapper`: the root is a sandbox (bubblewrap) whose end
    ends everything inside at once; it gets only the SIGKILL, so that the processes inside
    get their SIGTERM and grace first.
    """
    tree = tree if tree is not None else ProcessTree(root=root_pid)

    def find(table: dict[int, ProcInfo]) -> set[int]:
        members = tree.find(table)
        tree.remember(members, table)
        return members

    kill_only = frozenset({root_pid, pgid}) if wrapper else frozenset()
    return _terminate(find, [pgid], grace, spare=root_pid, kill_only=kill_only)


def reap_orphans() -> int:
    """Reap zombies reparented to loopd by the subreaper; returns how many were reaped.

    Only zombies outside loopd's session that no one claimed: children that loopd's own code
    started (and waits for) are in its session or claimed.
    """
    me, my_sid = os.getpid(), os.getsid(0)
    with _registry_lock:
        spare = set(_claimed) | set(_active_trees)
    reaped = 0
    for info in snapshot().values():
        if info.ppid == me and info.state == "Z" and info.sid != my_sid and info.pid not in spare:
            try:
                os.waitpid(info.pid, os.WNOHANG)
                reaped += 1
            except ChildProcessError:
                pass
    return reaped


BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def process_mark(pid: int) -> str:
    """Who `pid` is: this boot's id and the process's start (clock ticks after boot).

    Recorded beside every pid loopd may act on after a restart; "" when it is gone.
    """
    info = proc_info(pid)
    if info is None:
        return ""
    try:
        boot = BOOT_ID.read_text().strip()
    except OSError:
        boot = ""
    return f"{boot}/{info.start}"


def same_process(pid: int, mark: str) -> bool:
    """Whether `pid` is still the process its recorded `mark` names (not a reused pid)."""
    return pid > 1 and bool(mark) and process_mark(pid) == mark


def boot_time() -> float:
    """When the machine booted (seconds since the epoch)."""
    with open("/proc/stat") as fh:
        for line in fh:
            if line.startswith("btime "):
                return float(line.split()[1])
    return 0.0


def kill_leftovers(
    pgids: list[int], tree: Path | None, grace: float, *, started_after: float | None = None
) -> set[int]:
    """After a restart: kill the recorded process groups and whatever works inside `tree`.

    Spared: loopd and its ancestors, processes with a controlling terminal (a person's shell
    or editor in that folder) and, given `started_after` (the attempt's start, epoch seconds),
    processes older than it. When the machine rebooted since `started_after`, nothing of the
    attempt can be left and the recorded group ids may name other processes: nothing is
    killed. Returns the pids that were signalled.
    """
    ticks = os.sysconf("SC_CLK_TCK")
    booted = boot_time()
    if started_after is not None and booted > started_after:
        return set()
    spare = _ancestors()
    root = str(Path(tree).resolve()) if tree is not None else None
    groups = {g for g in pgids if g > 1}

    def targets(table: dict[int, ProcInfo]) -> set[int]:
        chosen = set()
        for info in table.values():
            if info.pid in spare or info.tty != 0:
                continue
            # btime is whole seconds: allow for it.
            if started_after is not None and booted + info.start / ticks < started_after - 2:
                continue
            if info.pgid in groups or (root and _inside(process_cwd(info.pid), root)):
                chosen.add(info.pid)
        return (_closure(chosen, table) - spare) if chosen else set()

    return _terminate(targets, [], grace, spare=0)


def run_in_own_group(
    argv: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float,
    on_start: Callable[[int], None] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run a person's command in a session of its own, output captured; at `timeout` its
    whole group is killed and TimeoutExpired raised. `on_start` gets its pid (= its group).

    Its own session: what it leaves behind is never in loopd's session, so `reap_orphans`
    reaps it, and a timeout reaches the children it started (an ssh under `git push`). The
    command itself is claimed until it has been waited for: reaped as an orphan, its exit
    status would be lost and read as 0 (a failed push as done).
    """
    with spawning():
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
        claim(proc.pid)
    try:
        if on_start is not None:
            on_start(proc.pid)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    finally:
        release(proc.pid)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
