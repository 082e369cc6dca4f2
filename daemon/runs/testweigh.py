"""The weakened-tests rule: an attempt whose checks test less than the base fails.

For each `done_when` command whose test runner loopd recognises (`testcounts.py`), the
attempt's counts, from its clean check tree, are weighed against the base's: fewer passed,
more skipped, more deselected, or no test run at all (where the base ran some, or was not
counted) fails the attempt with cause `checks-weakened`. The base's counts come from the
skip check (`skip_if_done`, which runs the checks where the run starts); where it did not
run (a retry, a forced run, `skip_if_done = false`), the checks run once on the base in the
check tree. A command listed in the loop's `allow_fewer_tests` is not weighed, and each time
it would have failed an event says so.
"""

from __future__ import annotations

from daemon.config import LoopConfig
from daemon.git.tree import RunTree
from daemon.runparts.checks import CheckResult, ChecksResult
from daemon.runparts.checktree import CheckTree
from daemon.runparts.journal import RunJournal
from daemon.runparts.stop import StopToken
from daemon.runparts.testcounts import runner_of, weakened
from daemon.state.eventtypes import Event
from daemon.state.records import TestCounts, Violation


def counts_of(checks: ChecksResult) -> list[TestCounts]:
    """Each check's counts as the run's record keeps them (runner "": not counted)."""
    return [r.tests or TestCounts() for r in checks.results]


def record_base(journal: RunJournal, checks: ChecksResult) -> None:
    """Keep what the checks counted where the run starts."""
    journal.run.base_tests = counts_of(checks)
    ids = {"executed", "not_run", "tampered"}  # kept in the record, too long for an event
    counted = [t.model_dump(exclude=ids) for t in journal.run.base_tests if t.runner]
    if counted:
        journal.event(Event.BASE_TESTS, counts=counted)


def weigh_tests(
    journal: RunJournal, tree: RunTree, cfg: LoopConfig, checks: ChecksResult, stop: StopToken
) -> None:
    """Add to `checks.weakened` each check that tests less than on the base."""
    if not any(runner_of(command) for command in cfg.done_when):
        return
    run = journal.run
    if len(run.base_tests) != len(cfg.done_when):
        base = CheckTree(journal, tree, cfg).run(run.base_commit, cfg.done_when, None, stop)
        record_base(journal, base)
        journal.save()
    for i, result in enumerate(checks.results[: len(cfg.done_when)]):
        counted = run.base_tests[i]
        why, allowable = weaker(counted if counted.runner else None, result)
        if not why:
            continue
        if allowable and result.command in cfg.allow_fewer_tests:
            journal.event(Event.CHECKS_WEAKENED_ALLOWED, command=result.command, why=why)
            continue
        checks.weakened.append((result.command, why))


def weaker(base: TestCounts | None, result: CheckResult) -> tuple[str, bool]:
    """Why `result` tests less than `base` ("" when it does not), and whether
    `allow_fewer_tests` may let that pass: a report that does not match what ran, or failed
    tests in a check that exited 0, fail whatever the loop allows."""
    tests = result.tests
    if tests is None:
        return "", True
    if result.exit_code == 0 and tests.tampered:
        return weakened(None, tests), False
    if result.exit_code == 0 and not tests.unreadable and tests.failed:
        return f"{tests.failed} failed in {tests.runner}'s report, but the command exited 0", False
    if tests.unreadable:
        # Where the check failed anyway, its failure says more than a missing count.
        return (weakened(None, tests) if result.exit_code == 0 else ""), True
    if base is not None and base.ran == 0 and not base.unreadable:
        return "", True  # the base ran no test either: nothing was taken away
    return weakened(base, tests), True


def check_violations(checks: ChecksResult) -> list[Violation]:
    """The checks' own failings as violations: a changed tree, weakened tests."""
    found = [
        Violation(kind="check_changed_tree", target=r.command, detail=", ".join(r.changed[:5]))
        for r in checks.results
        if r.changed
    ]
    found += [
        Violation(kind="checks_weakened", target=command, detail=why)
        for command, why in checks.weakened
    ]
    found += [
        Violation(kind="link_out_of_tree", target=path, detail=f"-> {target}")
        for path, target in checks.links_out
    ]
    return found
