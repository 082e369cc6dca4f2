"""The agent's environment: an allowlist of loopd's own, plus the profile's and the agent's key.

PATH loses loopd's own venv's `bin` (`without_loopd_venv`). Nothing else of loopd's
environment reaches an agent: not LOOPD_*, not NOTIFY_SOCKET (the
agent could report readiness for loopd), not the verifier's key, not the user's other
tokens. What the profile and the adapter set explicitly is the user's choice and is kept,
except LOOPD_* and NOTIFY_SOCKET, which no agent ever gets.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Collection, Mapping
from functools import cache
from pathlib import Path

ALLOWED = frozenset({"PATH", "LANG", "TERM", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL"})
ALLOWED_PREFIXES = ("LC_",)
FORBIDDEN = frozenset({"NOTIFY_SOCKET"})
FORBIDDEN_PREFIXES = ("LOOPD_",)


@cache
def loopd_venv() -> Path | None:
    """loopd's own virtual environment (None when loopd runs outside one)."""
    if sys.prefix == sys.base_prefix:
        return None
    return Path(os.path.realpath(sys.prefix))


def is_loopd_venv_bin(entry: str) -> bool:
    """Whether a PATH entry is loopd's own venv's `bin`."""
    venv = loopd_venv()
    return venv is not None and bool(entry) and os.path.realpath(entry) == str(venv / "bin")


def without_loopd_venv(search_path: str) -> str:
    """`search_path` without loopd's own venv's `bin`: however a person puts loopd on their
    PATH, its interpreter (which has no pytest) never takes the place of theirs in an agent's
    or a check's PATH. `loopd mcp` and `loopd-tool` are started by absolute path."""
    entries = search_path.split(os.pathsep)
    kept = [e for e in entries if not is_loopd_venv_bin(e)]
    return search_path if len(kept) == len(entries) else os.pathsep.join(kept)


def is_forbidden(name: str) -> bool:
    """Names that never reach an agent, whoever sets them."""
    return name in FORBIDDEN or name.startswith(FORBIDDEN_PREFIXES)


def agent_environment(
    profile_env: Mapping[str, str],
    invocation_env: Mapping[str, str],
    home: Path,
    base: Mapping[str, str] = os.environ,
    *,
    withhold: Collection[str] = (),
) -> dict[str, str]:
    """The environment an agent starts with.

    `base` contributes only allowlisted names; `profile_env` (the profile's `env`) and then
    `invocation_env` (what the adapter sets: the agent's key, its base URL) are added; HOME is
    `home`. `withhold` names variables (the verifier's `api_key_env`) removed unless the
    invocation itself sets them.
    """
    env = {
        name: value
        for name, value in base.items()
        if name in ALLOWED or name.startswith(ALLOWED_PREFIXES)
    }
    if "PATH" in env:
        env["PATH"] = without_loopd_venv(env["PATH"])
    env.update(profile_env)
    for name in withhold:
        if name:
            env.pop(name, None)
    env.update(invocation_env)
    env["HOME"] = str(home)
    return {name: str(value) for name, value in env.items() if not is_forbidden(name)}
