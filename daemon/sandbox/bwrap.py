"""bubblewrap: the command runs in its own user, PID, IPC and UTS namespaces, without capabilities.

The namespaces and flags: `--cap-drop ALL` (root inside keeps no host capability: no mount,
umount, remount), `--unshare-user --unshare-pid --unshare-ipc --unshare-uts`, a new session
(no terminal injection), `--die-with-parent` (with the PID namespace, nothing outlives the
sandbox: ending its first process ends every process in it), `--disable-userns` where
bubblewrap has it (no nested user namespace to escape through), a fresh /proc whose
`/proc/sys` is read-only (as root, sysctls are checked by uid, not by capability), and
`--unshare-net` when `[sandbox] network = false`. The mounts are `mounts.plan`.

bubblewrap is started with the command's own environment and nothing secret in its argv:
with a PID namespace its reaper is process 1 inside, and `/proc/1/environ` and
`/proc/1/cmdline` are readable there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from daemon.sandbox.base import Availability, Exposure, Launch, Sandbox
from daemon.sandbox.limits import Bounds
from daemon.sandbox.mounts import host_files, host_masks, plan

FLAGS = (
    "--cap-drop",
    "ALL",
    "--unshare-user",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--new-session",
    "--die-with-parent",
)
# Where the system's view starts: everything read-only, a fresh /dev and /proc.
ROOT_VIEW = (
    "--ro-bind", "/", "/",
    "--dev", "/dev",
    "--proc", "/proc",
    "--ro-bind", "/proc/sys", "/proc/sys",
)  # fmt: skip
# The probe runs the flags a run uses and checks from inside that they took: process 2 (the
# reaper is 1), no effective capability, no new user namespace.
PROBE_SCRIPT = (
    'test $$ = 2 && grep -q "^CapEff:[[:space:]]*0*$" /proc/self/status '
    "&& ! unshare -U true 2>/dev/null"
)
PROBE_TIMEOUT = 10.0
# The uid inside a sandbox with limits: not 0, so nothing inside believes it is root.
SANDBOX_UID = 1000


@dataclass(frozen=True)
class _Found:
    """The probe's result in this process: where bwrap is, what it accepts, whether it works."""

    path: str
    options: frozenset[str]
    availability: Availability


_lock = threading.Lock()
_found: dict[int, _Found] = {}  # by pid: a forked child probes again


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


def _probe() -> _Found:
    path = shutil.which("bwrap") or ""
    if not path:
        return _Found("", frozenset(), Availability(False, "bubblewrap (bwrap) is not installed"))
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    try:
        helped = subprocess.run(
            [path, "--help"], env=env, capture_output=True, text=True, timeout=PROBE_TIMEOUT
        )
        version = subprocess.run(
            [path, "--version"], env=env, capture_output=True, text=True, timeout=PROBE_TIMEOUT
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return _Found(path, frozenset(), Availability(False, f"{path} does not run: {exc}"))
    options = frozenset(w for w in (helped.stdout + helped.stderr).split() if w.startswith("--"))
    found = _Found(path, options, Availability(True, _first_line(version.stdout) or path))
    argv = [*base_argv(found, network=True), "--tmpfs", "/tmp", "--"]
    argv += ["/bin/sh", "-c", PROBE_SCRIPT]
    try:
        proc = subprocess.run(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=PROBE_TIMEOUT,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return _Found(path, options, Availability(False, f"bubblewrap did not run: {exc}"))
    if proc.returncode != 0:
        why = _first_line(proc.stderr) or (
            f"the sandbox did not take (exit {proc.returncode}): a capability or a user "
            "namespace was still there"
        )
        return _Found(path, options, Availability(False, why))
    return found


def found() -> _Found:
    """The probe's result, once per process."""
    pid = os.getpid()
    with _lock:
        result = _found.get(pid)
        if result is None:
            result = _found[pid] = _probe()
        return result


def base_argv(found: _Found, network: bool) -> list[str]:
    """bwrap and the flags every sandbox gets, up to the mounts."""
    argv = [found.path, *FLAGS]
    if "--disable-userns" in found.options:
        argv.append("--disable-userns")
    if not network:
        argv.append("--unshare-net")
    return argv + list(ROOT_VIEW)


class BwrapSandbox(Sandbox):
    """bubblewrap with the flags and mounts of the module docstring."""

    name: ClassVar[str] = "bwrap"
    confines: ClassVar[bool] = True

    @classmethod
    def availability(cls) -> Availability:
        return found().availability

    @staticmethod
    def weaker() -> str:
        """What this bubblewrap lacks that a newer one has, or ""."""
        if found().path and "--disable-userns" not in found().options:
            return "this bubblewrap has no --disable-userns (0.8.0 or later has it)"
        return ""

    @classmethod
    def gates(cls) -> bool:
        return "--block-fd" in found().options

    def launch(self, argv: list[str], env: Mapping[str, str], exposure: Exposure) -> Launch:
        result = found()
        if not result.availability.ok:
            raise OSError(f"bubblewrap cannot run here: {result.availability.detail}")
        args = base_argv(result, exposure.network)
        limits = exposure.limits
        if limits is not None and "--uid" in result.options:
            args += ["--uid", str(SANDBOX_UID)]
        tmp_size = limits.tmp if limits is not None and "--size" in result.options else 0
        exposure = exposure.adding(readable=[Path(f) for f in host_files()])
        for mount in plan(exposure, host_masks(os.environ)):
            args += mount.argv(tmp_size)
        read_end, write_end = os.pipe()
        pass_fds, gate = [write_end], None
        if exposure.gated and self.gates():
            # The sandbox's first process reads it after the mounts, before the command: a
            # byte (or loopd's end closing) lets the command start.
            wait_end, gate = os.pipe()
            pass_fds.append(wait_end)
            args += ["--block-fd", str(wait_end)]
        args += ["--chdir", str(exposure.cwd), "--json-status-fd", str(write_end), "--", *argv]
        bounds = Bounds.make(limits, exposure.agent) if limits is not None else None
        if bounds is not None:
            args = [*bounds.prefix(), *args]
        return Launch(
            argv=args,
            env=dict(env),
            pass_fds=tuple(pass_fds),
            status_fd=read_end,
            bounds=bounds,
            gate_fd=gate,
        )
