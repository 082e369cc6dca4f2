"""The embedded example: what the first `loopd run` of a fresh home shows.

A tiny repository (`repo/`: a module with two bugs, its tests, a README) that loopd copies
to `~/.cache/loopd/example` and commits, outside any home; and `agent.py`, a deterministic
stand-in for a coding agent (the built-in agent profile `example`, a `command` agent), so a
whole run happens with no model: trigger, agent, a nudge, checks, progress note, report.

The configuration knows nothing of it: `register` (called by the commands and the daemon's
assembly) adds the `example` profile and the repository loopd prepares on first start.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from daemon.config import AgentProfile, register_prepared_repo, register_profile

PACKAGE_DIR = Path(__file__).resolve().parent
AGENT_SOURCE = PACKAGE_DIR / "agent.py"
REPO_FILES = PACKAGE_DIR / "repo"
PROFILE = "example"  # the built-in agent profile that runs the agent
REPO_SETTING = "~/.cache/loopd/example"  # as the shipped loop file writes it
# The agent runs from a copy beside the repository, outside any home: a home is hidden from
# agents by the sandbox, and the checkout (where the package lives) is itself a home.
AGENT_SETTING = "~/.cache/loopd/example-agent/agent.py"


def repo_path() -> Path:
    """Where the example's repository lives: `~/.cache/loopd/example` of the current HOME."""
    return Path(os.path.expanduser(REPO_SETTING)).resolve()


def agent_path() -> Path:
    """Where the example agent runs from: a copy of the shipped script, made by prepare."""
    return Path(os.path.expanduser(AGENT_SETTING))


def is_example_repo(path: Path) -> bool:
    """Whether a loop's (resolved) repository is the example's."""
    return Path(path) == repo_path()


def profile() -> AgentProfile:
    """The built-in `example` profile: this Python runs the agent's copy, outside any home."""
    # Named by its full path, as a sandbox hides the home (and a checkout is one): read-only.
    return AgentProfile(adapter="command", command=[sys.executable, str(agent_path())])


def register() -> None:
    """Make the example known to the configuration: its profile, and its repository as one
    loopd prepares before the first run that needs it."""
    register_profile(PROFILE, profile)
    register_prepared_repo(PROFILE, is_example_repo)
