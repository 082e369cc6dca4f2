"""checktree.py in process: the clean check tree of a run, on real git, with real check
processes (confined as the home's sandbox says: bubblewrap where it is installed).

Between check sets every untracked and ignored file is cleared (`git clean -x`), save what
the loop's setup made; after each check, tracked files it changed are put back and named.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from daemon.config import LoopConfig
from daemon.git.tree import RunTree, prepare_tree, record_tree
from daemon.git.userrepo import LedgerWriter
from daemon.home import Home
from daemon.runparts.checktree import CHECK_SETUP_LOG, CheckTree, done_already
from daemon.runparts.journal import RunJournal
from daemon.runparts.services import RunServices
from daemon.runparts.stop import StopToken
from daemon.runs.executor import new_run
from daemon.runs.testweigh import weigh_tests
from daemon.scheduling.queue import PendingRun
from daemon.state.ledger import ledger_of
from daemon.state.records import TestCounts, Trigger
from tests.helpers import git, make_home, make_repo

FILES = {
    "app.py": "VALUE = 1\n",
    ".gitignore": "build/\n*.pyc\n",
    "test_app.py": "from app import VALUE\n\n\ndef test_value():\n    assert VALUE == 1\n",
}
PY = sys.executable


@dataclass
class Case:
    journal: RunJournal
    tree: RunTree
    check: CheckTree
    repo: Path


def make_case(tmp_path: Path, **loop: Any) -> Case:
    """A run of loop `calc` on a new repository, its tree made; its check tree not yet."""
    repo = make_repo(tmp_path / "repo", FILES)
    config = '[agents.a]\nadapter = "command"\ncommand = ["true"]\n'
    settings: dict[str, Any] = {
        "repo": str(repo),
        "task": "t",
        "agent": "a",
        "done_when": ["true"],
        **loop,
    }
    text = "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())
    home = Home(make_home(tmp_path / "home", config, {"calc": text}))
    loaded = home.load()
    assert not loaded.errors, loaded.errors
    services = RunServices(home=home, config=loaded.daemon, store=home.state())
    now = datetime(2026, 12, 7, 3, 0, tzinfo=UTC)
    trigger = Trigger(loop="calc", kind="manual", reason="test", ts=now)
    pending = PendingRun(
        id=services.store.new_run_id("calc", now), loop="calc", trigger=trigger, queued_at=now
    )
    cfg = loaded.loops["calc"]
    run = new_run(services, cfg, pending)
    writer = LedgerWriter(ledger_of(services.store.root), services.clock, run.id)
    limits = services.config.limits
    tree = prepare_tree(repo, "calc", run.id, "worktree", "HEAD", limits.worktrees_path, writer)
    record_tree(run, tree)
    journal = RunJournal(services, run)
    return Case(journal, tree, CheckTree(journal, tree, cfg.config), repo)


def test_ignored_files_a_check_set_left_are_gone_before_the_next(tmp_path: Path) -> None:
    """A check that leaves an ignored file (a build output, a .pyc) behind: the next set of
    checks starts without it, so no set can pass on what an earlier one left."""
    case = make_case(tmp_path)
    leave = f"{PY} -c \"import os; assert not os.path.exists('build/out.txt'); "
    leave += "os.makedirs('build'); open('build/out.txt', 'w').write('x'); open('x.pyc', 'w')\""
    untracked = f"{PY} -c \"import os; assert not os.path.exists('notes.txt'); "
    untracked += "open('notes.txt', 'w').write('x')\""
    commit = case.tree.base_commit
    for _ in range(2):
        result = case.check.run(commit, [leave, untracked], None, StopToken())
        assert [r.exit_code for r in result.results] == [0, 0], result.log()
        assert result.passed
    # The ignored files stay until the next set's clean: they were there, then cleared.
    assert (case.check.path / "build" / "out.txt").exists()
    case.check.at(commit, StopToken())
    assert not (case.check.path / "build").exists()
    assert not (case.check.path / "x.pyc").exists()
    assert not (case.check.path / "notes.txt").exists()


def test_a_tracked_file_a_check_changed_is_named_and_put_back(tmp_path: Path) -> None:
    """A check that rewrites app.py: it fails as having changed the tree, and the check after
    it reads the commit's app.py, not the rewritten one."""
    case = make_case(tmp_path)
    rewrite = f"{PY} -c \"open('app.py', 'w').write('VALUE = 2\\n')\""
    read = f"{PY} -c \"assert open('app.py').read() == 'VALUE = 1\\n', 'app.py was changed'\""
    delete = f"{PY} -c \"import os; os.remove('test_app.py')\""
    log = tmp_path / "checks.log"
    result = case.check.run(case.tree.base_commit, [rewrite, read, delete, read], log, StopToken())
    codes = [r.exit_code for r in result.results]
    assert codes == [0, 0, 0, 0], result.log()
    assert [r.changed for r in result.results] == [["app.py"], [], ["test_app.py"], []]
    assert [r.passed for r in result.results] == [False, True, False, True]
    assert not result.passed
    assert "this check changed files the commit holds: app.py;" in result.results[0].output
    assert "they were put back before the next check" in result.results[0].output
    assert (case.check.path / "test_app.py").exists()  # put back after the last check too
    assert log.read_text() == result.log()


def test_the_check_tree_is_the_commits_and_kept_between_sets(tmp_path: Path) -> None:
    case = make_case(tmp_path)
    base = case.tree.base_commit
    (case.tree.path / "app.py").write_text("VALUE = 3\n")
    git(case.tree.path, "commit", "-qam", "three")
    tip = git(case.tree.path, "rev-parse", "HEAD")
    show = f"{PY} -c \"print(open('app.py').read())\""
    at_base = case.check.run(base, [show], None, StopToken())
    assert at_base.results[0].output.strip().endswith("VALUE = 1")
    at_tip = case.check.run(tip, [show], None, StopToken())
    assert at_tip.results[0].output.strip().endswith("VALUE = 3")
    # An untracked file in the run's tree never reaches the check tree.
    (case.tree.path / "secret.txt").write_text("x")
    assert not (case.check.path / "secret.txt").exists()
    assert case.check.path != case.tree.path
    case.check.remove()
    assert not case.check.path.exists() and not case.check.git_dir.exists()


def test_setup_runs_once_in_a_new_check_tree_and_what_it_made_survives_cleans(
    tmp_path: Path,
) -> None:
    make = f"{PY} -c \"import os; os.makedirs('.venv', exist_ok=True); "
    make += "open('.venv/marker', 'a').write('made\\n')\""
    case = make_case(tmp_path, setup=[make])
    commit = case.tree.base_commit
    count = f"{PY} -c \"print(len(open('.venv/marker').readlines()))\""
    for _ in range(2):
        result = case.check.run(commit, [count], None, StopToken())
        assert result.passed, result.log()
        assert result.results[0].output.strip().endswith("1")  # setup ran once
    assert case.check.made() == [".venv"]
    assert (case.journal.services.store.run_dir(case.journal.run.id) / CHECK_SETUP_LOG).exists()


def test_a_failed_setup_fails_the_checks_and_is_tried_again(tmp_path: Path) -> None:
    case = make_case(tmp_path, setup=[f'{PY} -c "raise SystemExit(3)"'])
    log = tmp_path / "checks.log"
    result = case.check.run(case.tree.base_commit, ["true"], log, StopToken())
    assert not result.passed
    assert [r.command for r in result.results] == [f'setup: {PY} -c "raise SystemExit(3)"']
    assert result.results[0].exit_code == 3
    assert log.read_text() == result.log()
    assert not case.check.path.exists()  # removed: the next commit tries setup again
    assert case.check.made() == []


def test_the_done_check_counts_the_base_and_weighing_uses_it(tmp_path: Path) -> None:
    command = f"{PY} -m pytest -q -p no:cacheprovider"
    case = make_case(tmp_path, done_when=[command])
    stop = StopToken()
    checks = done_already(case.journal, stop, case.tree, _cfg(case))
    assert checks.passed, checks.log()
    (base,) = case.journal.run.base_tests
    assert (base.runner, base.ran, base.passed) == ("pytest", 1, 1)
    done_log = case.journal.services.store.run_dir(case.journal.run.id) / "done-check.log"
    assert done_log.read_text() == checks.log()
    # An attempt that skips the one test: weighed against the base, weaker.
    (case.tree.path / "test_app.py").write_text(
        "import pytest\nfrom app import VALUE\n\n\n@pytest.mark.skip\n"
        "def test_value():\n    assert VALUE == 2\n"
    )
    git(case.tree.path, "commit", "-qam", "skip it")
    tip = git(case.tree.path, "rev-parse", "HEAD")
    attempt = case.check.run(tip, [command], None, stop)
    weigh_tests(case.journal, case.tree, _cfg(case), attempt, stop)
    assert attempt.weakened == [(command, "no tests ran (pytest)")]


def test_weighing_counts_the_base_in_the_check_tree_when_no_done_check_ran(
    tmp_path: Path,
) -> None:
    command = f"{PY} -m pytest -q -p no:cacheprovider"
    case = make_case(tmp_path, done_when=[command])
    stop = StopToken()
    assert case.journal.run.base_tests == []
    (case.tree.path / "test_app.py").write_text(
        "from app import VALUE\n\n\ndef test_value():\n    assert VALUE == 1\n\n\n"
        "def test_more():\n    assert VALUE > 0\n"
    )
    git(case.tree.path, "commit", "-qam", "a test more")
    tip = git(case.tree.path, "rev-parse", "HEAD")
    attempt = case.check.run(tip, [command], None, stop)
    weigh_tests(case.journal, case.tree, _cfg(case), attempt, stop)
    assert attempt.weakened == []
    (base,) = case.journal.run.base_tests
    assert (base.runner, base.ran) == ("pytest", 1)
    saved = case.journal.services.store.load_run(case.journal.run.id)
    assert [t.ran for t in saved.base_tests] == [1]


def _cfg(case: Case) -> LoopConfig:
    return case.check.cfg


def test_weighing_each_check_allowing_fewer_tests_where_the_loop_says_so(
    tmp_path: Path,
) -> None:
    """Three checks: `true` (no runner: never weighed), pytest on everything (in
    allow_fewer_tests: an event says what it let pass) and pytest on test_app.py (weighed).
    The base's counts are an event without the test ids the record keeps."""
    every = f"{PY} -m pytest -q -p no:cacheprovider"
    one = f"{every} test_app.py"
    case = make_case(tmp_path, done_when=["true", every, one], allow_fewer_tests=[every])
    stop = StopToken()
    (case.tree.path / "test_app.py").write_text(
        "import pytest\nfrom app import VALUE\n\n\n@pytest.mark.skip\n"
        "def test_value():\n    assert VALUE == 1\n"
    )
    git(case.tree.path, "commit", "-qam", "skip it")
    tip = git(case.tree.path, "rev-parse", "HEAD")
    attempt = case.check.run(tip, ["true", every, one], None, stop)
    weigh_tests(case.journal, case.tree, _cfg(case), attempt, stop)
    assert attempt.weakened == [(one, "no tests ran (pytest)")]
    store = case.journal.services.store
    run_events = [e for e in store.events.read() if e.get("run") == case.journal.run.id]
    allowed = [e for e in run_events if e["type"] == "checks_weakened_allowed"]
    assert [(e["command"], e["why"]) for e in allowed] == [(every, "no tests ran (pytest)")]
    (base,) = [e for e in run_events if e["type"] == "base_tests"]
    assert [c["runner"] for c in base["counts"]] == ["pytest", "pytest"]
    assert [c["ran"] for c in base["counts"]] == [1, 1]
    assert not any({"executed", "not_run", "tampered"} & set(c) for c in base["counts"])
    # The ids stay in the run's record, for naming the tests a weaker attempt lost.
    assert all(len(t.executed) == 1 for t in case.journal.run.base_tests[1:])


def test_a_base_that_was_not_counted_lets_no_empty_run_through(tmp_path: Path) -> None:
    """The record keeps an uncounted base (runner ""): an attempt whose runner ran nothing
    still fails, and one that ran fewer than a counted base is weaker."""
    command = f"{PY} -m pytest -q -p no:cacheprovider"
    case = make_case(tmp_path, done_when=[command])
    stop = StopToken()
    case.journal.run.base_tests = [TestCounts()]
    (case.tree.path / "test_app.py").write_text("")
    git(case.tree.path, "commit", "-qam", "no tests")
    tip = git(case.tree.path, "rev-parse", "HEAD")
    attempt = case.check.run(tip, [command], None, stop)
    weigh_tests(case.journal, case.tree, _cfg(case), attempt, stop)
    assert [why for _, why in attempt.weakened] == ["no tests ran (pytest)"]
    case.journal.run.base_tests = [
        TestCounts(runner="pytest", ran=2, passed=2, executed=["test_app.py::a", "b"])
    ]
    (case.tree.path / "test_app.py").write_text("def test_a():\n    pass\n")
    git(case.tree.path, "commit", "-qam", "one test")
    tip = git(case.tree.path, "rev-parse", "HEAD")
    fewer = case.check.run(tip, [command], None, stop)
    weigh_tests(case.journal, case.tree, _cfg(case), fewer, stop)
    assert [why.split(";")[0] for _, why in fewer.weakened] == ["1 ran where the base ran 2"]


def test_the_done_check_keeps_each_failures_digest_free_of_tree_paths(tmp_path: Path) -> None:
    """A failing done check on the base: its digest (what a later attempt's failure is told
    apart from) does not hold the check tree's path, so another tree's same failure matches."""
    from daemon.runparts.checks import CheckResult, output_digest

    fails = f"{PY} -c \"import os, sys; print('failed in', os.getcwd()); sys.exit(1)\""
    case = make_case(tmp_path, done_when=[fails])
    checks = done_already(case.journal, StopToken(), case.tree, _cfg(case))
    assert not checks.passed
    (result,) = checks.results
    assert str(case.check.path) in result.output
    elsewhere = CheckResult(
        fails, 1, 0.0, False, result.output.replace(str(case.check.path), "/srv/other")
    )
    assert case.journal.run.base_failures == [output_digest(elsewhere, ("/srv/other",))]
