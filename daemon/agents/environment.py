"""The agent's environment: an allowlist of loopd's own, plus the profile's and the agent's key.

Nothing else of loopd's environment reaches an agent: not LOOPD_*, not NOTIFY_SOCKET (the
agent could report readiness for loopd), not the verifier's key, not the user's other
tokens. What the profile and the adapter set explicitly is the user's choice and is kept,
except LOOPD_* and NOTIFY_SOCKET, which no agent ever gets.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from pathlib import Path

ALLOWED = frozenset({"PATH", "LANG", "TERM", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL"})
ALLOWED_PREFIXES = ("LC_",)
FORBIDDEN = frozenset({"NOTIFY_SOCKET"})
FORBIDDEN_PREFIXES = ("LOOPD_",)


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
    env.update(profile_env)
    for name in withhold:
        if name:
            env.pop(name, None)
    env.update(invocation_env)
    env["HOME"] = str(home)
    return {name: str(value) for name, value in env.items() if not is_forbidden(name)}
