"""`loopd check --run-checks`: a loop's checks run now on its base, in the sandbox a run gets.

The same probe a run makes before its first attempt (`envprobe.py`), on demand: a fresh clone
of the loop's `base` beside the runs' trees, the loop's `setup` in it, then each `done_when`
command with the checks' environment and sandbox. What fails for the environment's sake is
returned, to be reported as an error of the loop's file; a check that fails otherwise is the
agents' work and is not. The clone and its scratch folder are removed afterwards.
"""

from __future__ import annotations

import secrets
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from daemon.clock import utc_now
from daemon.config import DaemonConfig, LoopConfig
from daemon.git.own import remove_path
from daemon.git.safe import Git
from daemon.git.tree import remove_scratch
from daemon.home import Home
from daemon.runparts.checks import ChecksResult, run_check
from daemon.runparts.confinement import Confinement
from daemon.runparts.services import RunServices
from daemon.runs.envprobe import EnvironmentFailure, environment_failures
from daemon.state.atomic import ensure_dir
from daemon.state.records import RunRecord, RunTrigger


@dataclass
class Probed:
    """What the checks said on the loop's base."""

    base: str  # the commit
    checks: ChecksResult = field(default_factory=ChecksResult)
    failures: list[EnvironmentFailure] = field(default_factory=list)
    setup_failed: str = ""  # a `setup` command that failed: the checks did not run


def probe_loop(home: Home, config: DaemonConfig, name: str, cfg: LoopConfig) -> Probed:
    """Run `setup` and `done_when` on a clean clone of the loop's base, in its sandbox."""
    repo = cfg.repo_path
    base = Git(repo, plain=True).out("rev-parse", "--verify", f"{cfg.base}^{{commit}}")
    root = ensure_dir(config.limits.worktrees_path / name)
    folder = Path(tempfile.mkdtemp(prefix="check-", dir=root))
    run = RunRecord(
        id=f"{folder.name}-{secrets.token_hex(3)}",
        loop=name,
        task="",
        trigger=RunTrigger(kind="manual", reason="loopd check --run-checks"),
        started=utc_now(),
        phase="preparing",
        isolation="clone",
        repo=str(repo),
    )
    tree = folder / "tree"
    try:
        Git(folder, plain=True).run("clone", "-q", "--no-checkout", "--shared", str(repo), "tree")
        Git(tree).run("checkout", "-q", "--detach", base)
        store = home.state(config.limits.events_rotate)
        services = RunServices(home=home, config=config, store=store)
        confinement = Confinement.for_run(services, cfg, run, tree)
        return _probe(confinement, cfg, base)
    finally:
        remove_path(folder)
        remove_scratch(config.limits.worktrees_path, name, run.id)


def _probe(confinement: Confinement, cfg: LoopConfig, base: str) -> Probed:
    env = confinement.checks_env()
    out = Probed(base)
    tree = confinement.tree
    for command in cfg.setup:
        done = run_check(
            command,
            tree,
            cfg.setup_timeout.total_seconds(),
            env,
            launcher=confinement.launch_check,
        )
        if not done.passed:
            out.setup_failed = f"`{command}` exited {done.exit_code}"
            return out
    timeout = cfg.check_timeout.total_seconds()
    for command in cfg.done_when:
        done = run_check(command, tree, timeout, env, launcher=confinement.launch_check)
        out.checks.results.append(done)
    exposure = confinement.exposure
    hidden = (*exposure.hidden, *exposure.denied) if confinement.sandbox.confines else ()
    out.failures = environment_failures(out.checks, env.get("PATH", ""), hidden)
    return out
