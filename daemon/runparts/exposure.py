"""What of the host a loop's commands see in the sandbox: each program they start, resolved.

The agent's program (the profile's command, or the adapter's CLI), the `setup` and
`done_when` programs: each found on the PATH the daemon gives them and followed to its
installation (`sandbox/programs.py`). `loopd check` prints the list with the reason for each
folder; a program that lies in a place of the deny list is an error there, and at run time
the attempt fails with the same words instead of reaching bubblewrap.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import daemon
from daemon.agents.environment import loopd_venv, without_loopd_venv
from daemon.agents.registry import PluginError, adapter_class, adapter_names
from daemon.config import DaemonConfig, LoopConfig
from daemon.sandbox.commandline import programs
from daemon.sandbox.deny import denied_paths
from daemon.sandbox.mounts import host_masks
from daemon.sandbox.paths import home_folders
from daemon.sandbox.programs import Resolved, resolve_program, shown

FIX = (
    "Fix: install the program outside that folder (a venv, pipx or npm prefix of its own) or "
    "name one that is not there; the deny list is in docs/configuration.md#sandbox"
)


class ProgramHidden(OSError):
    """A command's program lies where the sandbox never shows anything (the deny list)."""


@cache
def login_files() -> tuple[str, ...]:
    """Every installed adapter's login and credential files under HOME (a plugin's too):
    denied like `~/.ssh`."""
    names: list[str] = []
    for name in adapter_names():
        try:
            cls = adapter_class(name)
        except PluginError:
            continue  # refused with its error for the loops that use it (config/loading.py)
        names += [*cls.login_files, *cls.credential_files]
    return tuple(dict.fromkeys(names))


def denied_for(homes: set[Path]) -> tuple[Path, ...]:
    """The deny list under these homes, the agent CLIs' login files included."""
    return denied_paths(homes, login_files())


def refusal(resolved: Resolved, role: str) -> str:
    """The message for a program that cannot be shown in the sandbox."""
    return f"{role} {resolved.program!r} cannot run in the sandbox: {resolved.problem}. {FIX}"


@dataclass(frozen=True)
class Started:
    """One program a loop starts: which key starts it, and what it needs."""

    key: str  # agent, setup[0], done_when[1]
    resolved: Resolved


def loopd_itself(homes: set[Path], denied: tuple[Path, ...]) -> tuple[list[Path], list[Path]]:
    """What `loopd mcp` and `loopd-tool` need in the agent's sandbox: loopd's interpreter with
    its installation (paths), and its virtual environment and package (shown read-only even
    inside the home, as a check's venv is)."""
    resolved = resolve_program(sys.executable, "", homes, denied)
    package = Path(daemon.__file__).resolve().parent
    return resolved.paths, [*resolved.venvs, package]


def agent_program(cfg: LoopConfig, daemon: DaemonConfig) -> str:
    """The program the loop's agent profile starts (argv[0] of its invocation)."""
    profile = daemon.profile(cfg.agent)
    if profile is None:
        return ""
    if profile.adapter == "command":
        return profile.command[0] if profile.command else ""
    argv = adapter_class(profile.adapter)(profile).invocation("x").argv
    return argv[0] if argv else ""


def loop_programs(
    cfg: LoopConfig, daemon: DaemonConfig, search_path: str, environ: Mapping[str, str]
) -> list[Started]:
    """Every program the loop starts, resolved as the sandbox will see it."""
    homes = home_folders(environ)
    denied = denied_for(homes)
    out: list[Started] = []
    program = agent_program(cfg, daemon)
    checks = checks_path(cfg, search_path)  # loopd's own venv is not on it
    if program:
        out.append(Started("agent", resolve_program(program, checks, homes, denied)))
    for key in ("setup", "done_when"):
        for i, command in enumerate(getattr(cfg, key, None) or []):
            for name in programs(command):
                resolved = resolve_program(name, checks, homes, denied)
                out.append(Started(f"{key}[{i}]", resolved))
    return out


def checks_path(cfg: LoopConfig, search_path: str) -> str:
    """The PATH the loop's checks get: the daemon's without loopd's own venv, as the loop's
    `env` writes it."""
    search_path = without_loopd_venv(search_path)
    written = cfg.env.get("PATH")
    return search_path if written is None else written.replace("{PATH}", search_path)


def own_venv_programs(cfg: LoopConfig, search_path: str) -> list[tuple[str, str, str]]:
    """(key, program, where) for each check or setup program, and `python3`, that the loop's
    checks would find in loopd's own venv: its interpreter is not the project's."""
    venv = loopd_venv()
    if venv is None:
        return []
    path = checks_path(cfg, search_path)
    asked = []
    for key in ("setup", "done_when"):
        for i, command in enumerate(getattr(cfg, key, None) or []):
            asked += [(f"{key}[{i}]", name) for name in programs(command)]
    asked.append(("env", "python3"))  # the project's interpreter, named by no check
    out: dict[str, tuple[str, str, str]] = {}
    for key, name in asked:
        where = name if "/" in name else shutil.which(name, path=path)
        if where and Path(os.path.abspath(where)).parent.resolve() == venv / "bin":
            out.setdefault(name, (key, name, where))
    return list(out.values())


def describe(started: list[Started]) -> list[str]:
    """`loopd check`'s lines: each folder shown that would be hidden, and why; once each, and
    not when a folder already listed holds it."""
    chosen: dict[Path, str] = {}
    for item in started:
        for exposed in item.resolved.exposed:
            if exposed.path in chosen or not (exposed.venv or _hidden_by_default(exposed.path)):
                continue
            chosen[exposed.path] = f"{shown(exposed.path)}: {exposed.why} ({item.key})"
    return [
        line
        for path, line in chosen.items()
        if not any(other != path and path.is_relative_to(other) for other in chosen)
    ]


def _hidden_by_default(path: Path) -> bool:
    """Whether the sandbox would hide `path` without this bind (it lies in a masked place)."""
    real = os.path.realpath(path)
    return any(
        real == m or real.startswith(m.rstrip("/") + "/")
        for m in (os.path.realpath(x) for x in host_masks(os.environ))
    )
