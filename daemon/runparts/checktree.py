"""Where loopd's verdict comes from: a clean tree of the very commit being judged.

Never the agent's tree, where an ignored `__pycache__/app.cpython-311.pyc`, a `.venv` or any
other file the branch does not hold could make a check pass. Beside the run's tree, loopd
keeps `RUN_ID.check/` with a git directory of its own, `RUN_ID.check.git`, whose objects are
the run's own git directory's (alternates: nothing is copied). Before each set of checks the
folder is brought to the commit (`read-tree -u --reset`, which rewrites only what differs)
and cleared of every untracked and ignored file (`git clean -ffdx`), except what the loop's
`setup` made there: setup runs once in a new check tree, with the checks' environment, so
`{tree}` in the loop's `env` names the check tree.

After each check command the tracked files must still be the commit's: a check that changed
one (a `conftest.py` rewriting `app.py`) fails, the files are put back before the next
check, and the attempt fails with cause `check-changed-tree`. Ignored build outputs are fine.
Each check's test runner is asked to report what it executed into a folder of loopd's in the
check tree's git directory (`testreports.py`), made empty before each check; that report (or
the runner's printed summary) is counted for the weakened-tests rule.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from daemon.config import LoopConfig
from daemon.git.own import OwnGit, remove_path
from daemon.git.setupmade import anchored
from daemon.git.tree import RunTree, check_folders
from daemon.redact import redact
from daemon.runparts.checks import CheckResult, ChecksResult, base_digests, run_check
from daemon.runparts.confinement import Confinement
from daemon.runparts.journal import RunJournal
from daemon.runparts.setup import DONE_LOG, SetupResult, run_setup
from daemon.runparts.stop import StopToken
from daemon.runparts.testreports import ask, read, shown
from daemon.runparts.treelinks import links_out
from daemon.state.atomic import write_atomic
from daemon.state.records import TestCounts

BRANCH = "loopd-check"
MADE = "loopd-setup-made.json"  # in the check tree's git directory: what setup made there
CHECK_SETUP_LOG = "check-setup.log"
REPORTS = "loopd-reports"  # in the check tree's git directory: the runners' reports


class CheckTree:
    """The run's check tree: made on first use, brought to a commit before each set of checks."""

    def __init__(self, journal: RunJournal, tree: RunTree, cfg: LoopConfig) -> None:
        self.journal = journal
        self.tree = tree
        self.cfg = cfg
        assert tree.own_dir is not None, "the run's tree has no git directory of loopd's"
        self.path, self.git_dir = check_folders(tree.own_dir)

    # the tree ----------------------------------------------------------------------------
    def _own(self, commit: str) -> tuple[OwnGit, bool]:
        """loopd's git on the check tree; True when it was made now."""
        own = OwnGit(self.git_dir, self.path)
        if own.exists() and self.path.is_dir():
            own.bare.run("update-ref", f"refs/heads/{BRANCH}", commit)
            return own, False
        self.remove()
        run_own = self.tree.own
        object_format = run_own.bare.out("rev-parse", "--show-object-format") or "sha1"
        own = OwnGit.create(
            self.git_dir,
            self.path,
            run_own.path,
            BRANCH,
            commit,
            object_format,
            self.tree.user.lfs_storage(),
        )
        self.path.mkdir(parents=True)
        return own, True

    def made(self) -> list[str]:
        """What setup made in the check tree (kept across cleans)."""
        try:
            data = json.loads((self.git_dir / MADE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return [p for p in data if isinstance(p, str)] if isinstance(data, list) else []

    def at(self, commit: str, stop: StopToken) -> SetupResult | None:
        """Bring the check tree to `commit`, clean; setup there when the tree is new (its
        result; None when nothing ran or it ran before)."""
        own, new = self._own(commit)
        own.git.run("read-tree", "-u", "--reset", commit)
        self._clean(own)
        if not (new and self.cfg.setup):
            return None
        result = run_setup(self.journal, stop, self.path, own, self.cfg, CHECK_SETUP_LOG)
        if result.passed:
            write_atomic(self.git_dir / MADE, json.dumps(result.made))
        else:
            self.remove()  # a failed setup is tried again on the next commit
        return result

    def _clean(self, own: OwnGit) -> None:
        keep = []
        for rel in self.made():
            keep += ["-e", anchored(rel)]
        own.git.run("clean", "-ffdxq", *keep)

    def changed(self, own: OwnGit) -> list[str]:
        """Tracked files that no longer match the commit (changed, deleted, retyped)."""
        own.git.run("update-index", "-q", "--refresh", check=False)
        out = own.git.run("diff-files", "--name-only", "-z").stdout
        return sorted({p.decode("utf-8", "replace") for p in out.split(b"\0") if p})

    def remove(self) -> None:
        for path in (self.path, self.git_dir):
            if path.exists() or path.is_symlink():
                remove_path(path)

    # the checks ----------------------------------------------------------------------------
    def run(
        self, commit: str, commands: list[str], log_path: Path | None, stop: StopToken
    ) -> ChecksResult:
        """`commands` on a clean tree of `commit` (setup first when the tree is new)."""
        setup = self.at(commit, stop)
        if setup is not None and not setup.passed:
            return _setup_failed(setup, log_path)
        own = OwnGit(self.git_dir, self.path)
        outside = links_out(self.path, own, commit, self.journal.run.base_commit)
        confinement = Confinement.for_run(
            self.journal.services, self.cfg, self.journal.run, self.path
        )
        env = confinement.checks_env()
        result = ChecksResult(links_out=outside)
        timeout = self.cfg.check_timeout.total_seconds()
        for command in commands:
            asked = ask(command, self.git_dir / REPORTS, env)
            writable = (asked.folder,) if asked.folder is not None else ()
            launcher = partial(confinement.launch_check, writable=writable)
            done = run_check(
                asked.command, self.path, timeout, {**env, **asked.env}, stop, launcher=launcher
            )
            stop.raise_if_stopped()
            done.command = redact(command)  # as the loop writes it (allow_fewer_tests, the logs)
            done.output = shown(asked, done.output)  # go's -json report, as text
            done.tests = read(asked, done.output)
            changed = self.changed(own)
            if changed:
                done.changed = changed
                done.output += (
                    "\n[loopd: this check changed files the commit holds: "
                    + ", ".join(changed[:10])
                    + ("..." if len(changed) > 10 else "")
                    + "; they were put back before the next check]\n"
                )
                own.git.run("read-tree", "-u", "--reset", commit)
            result.results.append(done)
        if log_path is not None:
            write_atomic(log_path, result.log())
        return result


def _setup_failed(setup: SetupResult, log_path: Path | None) -> ChecksResult:
    """The checks' result when setup fails on the commit: that failure, as a failed check."""
    result = ChecksResult(results=list(setup.checks.results))
    for item in result.results:
        item.command = f"setup: {item.command}"
    if setup.timed_out_before:
        spent = CheckResult(f"setup: {setup.timed_out_before}", None, 0.0, True, "")
        result.results.append(spent)
    if log_path is not None:
        write_atomic(log_path, result.log())
    return result


def done_already(
    journal: RunJournal, stop: StopToken, tree: RunTree, cfg: LoopConfig
) -> ChecksResult:
    """`done_when` on a clean tree of the commit the run starts from (`skip_if_done`);
    done-check.log. What its test runners count is the base of the weakened-tests rule."""
    run = journal.run
    log = journal.services.store.run_dir(run.id) / DONE_LOG
    check_tree = CheckTree(journal, tree, cfg)
    checks = check_tree.run(tree.base_commit, cfg.done_when, log, stop)
    run.base_tests = [r.tests or TestCounts() for r in checks.results]
    run.base_failures = base_digests(checks, (str(check_tree.path), str(tree.path)))
    return checks
