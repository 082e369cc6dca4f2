"""A loop's checks tried before its first run: on its base in its sandbox, and whether its
programs are loopd's own venv's (`loopd check` and `loopd new`)."""

from __future__ import annotations

import sys
from typing import Any

from daemon.config import LoadedConfig
from daemon.config.errors import ConfigError
from daemon.git.safe import GitError
from daemon.home import Home
from daemon.runparts.confinement import SandboxUnavailable
from daemon.runparts.exposure import own_venv_programs
from daemon.runs.checkprobe import probe_loop


def own_venv_warnings(loop: Any, search_path: str) -> list[str]:
    """A warning per program of the loop's checks found in loopd's own venv."""
    return [
        f"{loop.path}: {key}: {name!r} resolves to {where}, loopd's own venv, not your "
        "project's: its checks would miss your packages (pytest); name your project's venv "
        'in the loop\'s env instead (env = { PATH = "/path/to/venv/bin:{PATH}" })'
        for key, name, where in own_venv_programs(loop.config, search_path)
    ]


def run_loop_checks(home: Home, loaded: LoadedConfig, name: str, loop: Any) -> int:
    """One loop's setup and checks on its base, in its sandbox: environment failures added
    to `loaded.errors`; how many checks passed."""
    cfg = loop.config
    print(f"{name}: running setup and done_when on {cfg.base} in the sandbox", file=sys.stderr)
    try:
        probed = probe_loop(home, loaded.daemon, name, cfg)
    except (GitError, OSError, SandboxUnavailable) as exc:
        problem = f"the checks could not run on its base: {exc}"[:500]
        loaded.errors.append(ConfigError(loop.path, "base", problem, "see `loopd once`"))
        return 0
    if probed.setup_failed:
        problem = f"setup failed on {probed.base[:12]}: {probed.setup_failed}"
        loaded.errors.append(ConfigError(loop.path, "setup", problem, "fix `setup`"))
    for found in probed.failures:
        problem = f"`{found.command}`: {found.why} (on {probed.base[:12]})"
        loaded.errors.append(ConfigError(loop.path, found.key, problem, found.fix))
    passed = sum(r.passed for r in probed.checks.results)
    print(f"{name}: {passed} of {len(cfg.done_when)} check(s) pass on its base", file=sys.stderr)
    return passed
