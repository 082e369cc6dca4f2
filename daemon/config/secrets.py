"""The environment variables a home names (keys, secrets, variables passed to checks), and
which of them an environment file such as a systemd unit's `EnvironmentFile=` lacks.

Under systemd loopd sees only the unit's environment: a key left in the person's shell makes
every delivery a 403 or every agent start a refused login, silently. `loopd systemd install`
lists every name; `loopd check --env-file FILE` warns for each one the file lacks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from daemon.config.loading import LoadedConfig

_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=")


@dataclass(frozen=True)
class NamedVariable:
    """An environment variable the configuration names, and the key that names it."""

    name: str
    where: str  # e.g. "loopd.toml [remotes.gh] secret_env"


def named_variables(loaded: LoadedConfig) -> list[NamedVariable]:
    """Every variable loopd.toml and the loop files name, once each, in the files' order."""
    config = loaded.daemon
    found: list[NamedVariable] = []
    if config.verifier.api_key_env:
        found.append(
            NamedVariable(config.verifier.api_key_env, "loopd.toml [verifier] api_key_env")
        )
    for name, profile in sorted(config.agents.items()):
        if profile.api_key_env:
            found.append(
                NamedVariable(profile.api_key_env, f"loopd.toml [agents.{name}] api_key_env")
            )
    for name, remote in sorted(config.remotes.items()):
        if remote.secret_env:
            found.append(
                NamedVariable(remote.secret_env, f"loopd.toml [remotes.{name}] secret_env")
            )
    for name, loop in sorted(loaded.loops.items()):
        for variable in loop.config.checks_env:
            found.append(NamedVariable(variable, f"loops/{name}.toml checks_env"))
    seen: set[str] = set()
    unique = []
    for item in found:
        if item.name not in seen:
            seen.add(item.name)
            unique.append(item)
    return unique


def env_file_names(path: Path) -> set[str]:
    """The variables an environment file assigns (systemd's `KEY=value` lines; `#` and `;`
    start comments). Values are never read into loopd."""
    names = set()
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.lstrip().startswith(("#", ";")):
            continue
        match = _ASSIGNMENT.match(line)
        if match:
            names.add(match.group(1))
    return names


def missing_from_env_file(loaded: LoadedConfig, path: Path) -> list[str]:
    """A warning per named variable `path` does not assign (or one for a file not there)."""
    try:
        present = env_file_names(path)
    except FileNotFoundError:
        present = set()
        if not named_variables(loaded):
            return []
        return [
            f"{path}: no such environment file, so none of "
            + ", ".join(v.name for v in named_variables(loaded))
            + " reaches loopd there. Fix: write KEY=value lines for them into it (chmod 600)"
        ]
    except OSError as exc:
        return [f"{path}: cannot be read ({exc.strerror}). Fix: make it readable by this user"]
    return [
        f"{path}: {item.name} (named by {item.where}) is not set there, so loopd run under "
        f"this environment will not have it. Fix: add a line {item.name}=... to {path}"
        for item in named_variables(loaded)
        if item.name not in present
    ]
