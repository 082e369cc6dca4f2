"""testweigh.py: an attempt's counts weighed against the base's, whether `allow_fewer_tests`
may let the difference pass, and the checks' failings as violations."""

from __future__ import annotations

from daemon.runparts.checks import CheckResult, ChecksResult
from daemon.runs.testweigh import check_violations, counts_of, weaker
from daemon.state.records import TestCounts


def _tests(ran: int, passed: int, failed: int = 0, **more: object) -> TestCounts:
    return TestCounts(runner="pytest", ran=ran, passed=passed, failed=failed, **more)  # type: ignore[arg-type]  # TestCounts' own fields, by name


def _result(tests: TestCounts | None, exit_code: int | None = 0) -> CheckResult:
    return CheckResult("pytest -q", exit_code, 0.1, False, "", tests=tests)


def test_a_check_no_runner_counted_is_never_weaker() -> None:
    assert weaker(_tests(3, 3), _result(None)) == ("", True)
    assert weaker(None, _result(None, exit_code=1)) == ("", True)


def test_no_test_run_fails_where_the_base_was_not_counted() -> None:
    """A base that was not counted (another runner, no summary) is no licence: an attempt
    whose runner ran nothing still fails."""
    assert weaker(None, _result(_tests(0, 0))) == ("no tests ran (pytest)", True)
    uncounted = TestCounts()  # the record's "not counted" (runner "")
    assert uncounted.ran == 0 and not uncounted.runner


def test_no_test_run_passes_only_where_the_base_ran_none_either() -> None:
    assert weaker(_tests(0, 0), _result(_tests(0, 0))) == ("", True)
    assert weaker(_tests(2, 2), _result(_tests(0, 0))) == ("no tests ran (pytest)", True)
    # A base whose count could not be read took nothing away either way: weighed in full.
    unread = TestCounts(runner="pytest", unreadable="no report")
    assert weaker(unread, _result(_tests(0, 0))) == ("no tests ran (pytest)", True)
    assert weaker(unread, _result(_tests(2, 2))) == ("", True)


def test_fewer_tests_than_the_base_may_be_allowed() -> None:
    why, allowable = weaker(_tests(3, 3), _result(_tests(2, 2)))
    assert why == "2 ran where the base ran 3; 2 passed where the base had 3"
    assert allowable is True
    assert weaker(_tests(2, 1, 1), _result(_tests(2, 2), exit_code=0)) == ("", True)


def test_a_report_that_does_not_match_what_ran_is_never_allowed() -> None:
    tampered = _tests(2, 2, tampered=["t::a (raised, but the report says passed)"])
    why, allowable = weaker(_tests(1, 1), _result(tampered))
    assert (
        why == "pytest's report does not match what ran: t::a (raised, but the report says passed)"
    )
    assert allowable is False
    # Where the check failed anyway, it is still named, as a difference the loop may allow.
    assert weaker(_tests(2, 2), _result(tampered, exit_code=1)) == (why, True)


def test_failed_tests_in_a_check_that_exited_0_are_never_allowed() -> None:
    why, allowable = weaker(_tests(2, 2), _result(_tests(3, 2, 1)))
    assert (why, allowable) == ("1 failed in pytest's report, but the command exited 0", False)
    # The same count from a check that failed: the check's failure says it already.
    assert weaker(_tests(3, 2, 1), _result(_tests(3, 2, 1), exit_code=1)) == ("", True)


def test_an_unreadable_count_fails_a_passing_check_only() -> None:
    unread = TestCounts(runner="go", unreadable="the -json report was cut off")
    why, allowable = weaker(_tests(2, 2), _result(unread))
    assert why == "loopd could not count what go ran: the -json report was cut off"
    assert allowable is True
    assert weaker(_tests(2, 2), _result(unread, exit_code=1)) == ("", True)
    # An unreadable count with failures in it is not read as failures.
    odd = TestCounts(runner="go", failed=2, unreadable="cut off")
    assert weaker(None, _result(odd))[1] is True


def test_the_counts_a_run_record_keeps_and_the_checks_violations() -> None:
    counted = _result(_tests(2, 2))
    changed = CheckResult("make", 0, 0.1, False, "", changed=[f"f{n}" for n in range(7)])
    checks = ChecksResult(
        results=[counted, changed],
        weakened=[("pytest -q", "no tests ran (pytest)")],
        links_out=[("docs/x", "/etc/passwd")],
    )
    assert counts_of(checks) == [counted.tests, TestCounts()]
    found = [(v.kind, v.target, v.detail) for v in check_violations(checks)]
    assert found == [
        ("check_changed_tree", "make", "f0, f1, f2, f3, f4"),
        ("checks_weakened", "pytest -q", "no tests ran (pytest)"),
        ("link_out_of_tree", "docs/x", "-> /etc/passwd"),
    ]
    assert check_violations(ChecksResult(results=[counted])) == []
