"""The first start of a home: one run of the embedded example, and a few lines about it.

When `state/runs/` is empty, `loopd run` triggers each enabled loop whose repository is the
example's once (`manual`). When that run has ended, the daemon prints what happened, where
to read it in `state/`, and how to point a loop at your own repository and agent.
"""

from __future__ import annotations

import os
import shutil
import sys
from datetime import datetime
from pathlib import Path

from daemon.example import is_example_repo
from daemon.people.report import build_report, write_report
from daemon.service.context import Context
from daemon.service.intake import Intake
from daemon.state.records import RunRecord, Trigger
from daemon.state.store import UnreadableFile

REASON = "the first start of this home: the embedded example shows a whole run"


class FirstRun:
    """Starts the example's run on a home's first start and reports it when it ends."""

    def __init__(self, ctx: Context, started: datetime) -> None:
        self.ctx = ctx
        self.started = started
        self.waiting: dict[str, str] = {}  # run id -> loop

    def start(self, intake: Intake, now: datetime) -> None:
        """Trigger the example loops once when the home has no runs yet."""
        store = self.ctx.store
        if store.run_ids() or intake.queue.pending():
            return
        for name, loop in sorted(self.ctx.loops.items()):
            if not (loop.config.enabled and is_example_repo(loop.config.repo_path)):
                continue
            intake.offer(Trigger(loop=name, kind="manual", reason=REASON, ts=now), now)
            pending = intake.queue.pending(name)
            if pending:
                self.waiting[pending[-1].id] = name

    def ended(self, now: datetime) -> list[str]:
        """Lines to print for the example runs that have ended since the last call."""
        store = self.ctx.store
        lines: list[str] = []
        for run_id in list(self.waiting):
            if run_id in store.live_runs():
                continue
            try:
                run = store.load_run(run_id)
            except FileNotFoundError:
                if store.queued_run(run_id) is not None:
                    continue  # not started yet
                del self.waiting[run_id]  # cancelled while queued
                continue
            except UnreadableFile:
                continue
            if run.outcome is None:
                continue
            del self.waiting[run_id]
            lines += self._summary(run, now)
        return lines

    def _summary(self, run: RunRecord, now: datetime) -> list[str]:
        store = self.ctx.store
        home = self.ctx.home.root
        report = write_report(store, build_report(store, self.started, now))

        def rel(path: Path) -> str:
            return os.path.relpath(path, home)

        nudges = sum(a.nudges for a in run.attempts)
        stalls = sorted({s.kind for a in run.attempts for s in a.stalls})
        checks = "pass" if run.attempts and run.attempts[-1].checks_passed else "fail"
        command = typed_command()
        loopd = command if Path.cwd() == home else f"{command} --home {home}"
        return [
            f"loopd: the example ran ({run.id}): {run.outcome}, {run.reason}.",
            f"  What happened: the example agent worked on branch {run.branch} of {run.repo}; "
            f"{len(run.attempts)} attempt(s), {nudges} nudge(s)"
            + (f" (after: {', '.join(stalls)})" if stalls else "")
            + f"; loopd's checks {checks}.",
            f"  Read it: `{loopd} show {run.id}` (--diff: the changes), `{loopd} logs {run.id}` "
            f"(what the agent did), `{loopd} report`.",
            f"  In state/: {rel(store.run_dir(run.id))}/ (run.toml, attempt-N/), "
            f"{rel(store.progress_path(run.loop))}, {rel(report)}; state/README.md says what "
            "each file is.",
            f"  Your own loop: `{loopd} new NAME --repo PATH` writes loops/NAME.toml from your "
            "repository and tries its checks (or copy loops/"
            f"{run.loop}.toml to loops/NAME.toml; set repo, task, "
            'agent ("qwen", "claude", ... or a profile in loopd.toml) and done_when); set '
            f"enabled = false in loops/{run.loop}.toml; `{loopd} check`; the running loopd "
            f"loads the files within seconds (`{loopd} reload`: at once), then `{loopd} trigger "
            "NAME`.",
        ]


def typed_command() -> str:
    """`loopd` as the person can type it: the name when it is on the PATH, else the path it
    was started by (`.venv/bin/loopd` after the README's first command)."""
    started = sys.argv[0] if sys.argv else ""
    if os.path.basename(started) != "loopd" or "/" not in started:
        return "loopd"
    found = shutil.which("loopd")
    if found and os.path.realpath(found) == os.path.realpath(started):
        return "loopd"
    relative = os.path.relpath(started)
    return relative if not relative.startswith("../") else started
