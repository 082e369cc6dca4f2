"""A run's `setup` and the `skip_if_done` check, before its first attempt.

`setup` commands run with `/bin/sh -c` in the run's tree, in the run's sandbox with the
checks' environment (the loop's `env`, so `PATH = "{tree}/.venv/bin:{PATH}"` reaches them),
one after the other within `setup_timeout`; their output goes to `state/runs/RUN_ID/setup.log`
(redacted). What they create in the tree (a virtualenv, `*.egg-info`, `node_modules`) is kept
read-only for the agent from then on and out of loopd's commits, through loopd's own exclude
list, so the branch holds the agent's work only.

`skip_if_done`: after setup, `done_when` runs on the commit the run starts from; when every
check passes there is nothing to do, and the run ends `skipped` without an agent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from daemon.config import LoopConfig
from daemon.git.own import OwnGit
from daemon.git.setupmade import setup_excludes
from daemon.runparts.checks import CheckResult, ChecksResult, run_check
from daemon.runparts.confinement import Confinement
from daemon.runparts.journal import RunJournal
from daemon.runparts.stop import StopToken
from daemon.state.atomic import write_atomic
from daemon.state.eventtypes import Event
from daemon.state.records import RunRecord, is_experiment

SETUP_LOG = "setup.log"
DONE_LOG = "done-check.log"
TAIL = 3000  # characters of setup.log an escalation quotes


@dataclass
class SetupResult:
    """How setup went: its commands' results and the paths it made (relative to the tree)."""

    checks: ChecksResult
    made: list[str] = field(default_factory=list)
    timed_out_before: str = ""  # a command never started: setup_timeout was spent

    @property
    def passed(self) -> bool:
        return self.checks.passed and not self.timed_out_before

    def failure(self) -> str:
        """The failing command and how it failed, in a few words."""
        if self.timed_out_before:
            return f"setup_timeout spent before `{self.timed_out_before}`"
        for result in self.checks.results:
            if not result.passed:
                how = "timed out" if result.timed_out else f"exit {result.exit_code}"
                return f"`{result.command}` failed ({how})"
        return ""


def checks_done_first(cfg: LoopConfig, run: RunRecord) -> bool:
    """Whether `done_when` runs where the run starts, before any agent (`skip_if_done`):
    never for a forced run, a retry or an experiment."""
    if not (cfg.skip_if_done and cfg.done_when) or run.trigger.force:
        return False
    return not is_experiment(run) and run.trigger.kind != "retry"


def already_done_reason(commit: str) -> str:
    """The reason of a run skipped because `done_when` passes where it would start."""
    return f"already done: done_when passes on {commit[:12]}, where it would start"


def setup_failed_reason(run_id: str, result: SetupResult, where: str = "") -> str:
    """The reason of a run whose `setup` failed (`where`: on which machine, when not here)."""
    return f"setup failed{where}: {result.failure()}; its output: state/runs/{run_id}/{SETUP_LOG}"


def setup_tree(
    journal: RunJournal, stop: StopToken, tree: Path, own: OwnGit, cfg: LoopConfig
) -> SetupResult | None:
    """The loop's `setup` in a new tree of the run (None: it has none); when it passes, what
    it made is read-only for the agent and out of loopd's commits."""
    if not cfg.setup:
        return None
    result = run_setup(journal, stop, tree, own, cfg)
    if result.passed:
        keep_setup_paths(journal, tree, own, cfg, result.made)
    return result


def untracked(own: OwnGit) -> set[str]:
    """Paths in the tree that are not in loopd's index; a new folder is listed whole."""
    out = own.git.run("ls-files", "--others", "--directory", "-z").stdout
    return {p.decode("utf-8", "surrogateescape").rstrip("/") for p in out.split(b"\0") if p}


def run_setup(
    journal: RunJournal,
    stop: StopToken,
    tree: Path,
    own: OwnGit,
    cfg: LoopConfig,
    log_name: str = SETUP_LOG,
) -> SetupResult:
    """Run the loop's `setup` in `tree` (sandboxed); write setup.log; the paths it made."""
    services, run = journal.services, journal.run
    before = untracked(own)
    confinement = Confinement.for_run(services, cfg, run, tree)
    env = confinement.checks_env()
    limit = cfg.setup_timeout.total_seconds()
    deadline = time.monotonic() + limit
    result = SetupResult(ChecksResult())
    journal.event(Event.SETUP_STARTED, commands=len(cfg.setup), log=log_name)
    for command in cfg.setup:
        left = deadline - time.monotonic()
        if left <= 0:
            result.timed_out_before = command
            break
        done: CheckResult = run_check(
            command, tree, left, env, stop, launcher=confinement.launch_check
        )
        result.checks.results.append(done)
        stop.raise_if_stopped()
        if not done.passed:
            break
    text = result.checks.log()
    if result.timed_out_before:
        text += f"[setup_timeout ({cfg.setup_timeout}) spent; not run: {result.timed_out_before}]\n"
    write_atomic(journal.services.store.run_dir(run.id) / log_name, text)
    result.made = sorted(untracked(own) - before)
    journal.event(
        Event.SETUP_FINISHED,
        log=log_name,
        passed=result.passed,
        made=result.made[:50],
        results=[{"command": r.command, "exit_code": r.exit_code} for r in result.checks.results],
    )
    return result


def setup_tail(store_run_dir: Path, limit: int = TAIL, name: str = SETUP_LOG) -> str:
    """The end of a run's setup.log (or of its log `name`; "" when it has none)."""
    try:
        text = (store_run_dir / name).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return text if len(text) <= limit else "[...]\n" + text[-limit:]


def keep_setup_paths(
    journal: RunJournal, tree: Path, own: OwnGit, cfg: LoopConfig, made: list[str]
) -> None:
    """What setup made: read-only for the agent from now on, and out of loopd's commits."""
    if not made:
        return
    confinement = Confinement.for_run(journal.services, cfg, journal.run, tree)
    confinement.keep_read_only([tree / path for path in made])
    journal.save()
    own.exclude(setup_excludes(journal.run, tree))
