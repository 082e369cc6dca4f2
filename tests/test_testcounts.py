"""testcounts.py: which runner a check command starts, what its printed summary counts, and
why one count tests less than another. Real pytest, unittest and cargo where they print; the
summaries of runners not installed here (go, jest, vitest, nextest) as their docs show them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.runparts.checks import CheckResult
from daemon.runparts.testcounts import count, runner_of, weakened
from daemon.runparts.testreports import ask, read
from daemon.runs.testweigh import weaker
from daemon.state.records import TestCounts


@pytest.mark.parametrize(
    "command,runner",
    [
        ("pytest -q", "pytest"),
        ("py.test tests", "pytest"),
        ("python -m pytest -q", "pytest"),
        ("/usr/bin/python3 -m pytest", "pytest"),
        ("uv run pytest -x", "pytest"),
        ("poetry run pytest", "pytest"),
        ("cd sub && .venv/bin/pytest", "pytest"),
        ("python3 -m unittest discover", "unittest"),
        ("go test ./...", "go"),
        ("cargo test --all", "cargo"),
        ("cargo nextest run", "cargo"),
        ("npx jest --ci", "jest"),
        ("npx vitest run", "vitest"),
        ("tox -e py311", ""),  # tox starts pytest in an environment loopd cannot reach
        ("make test", ""),
        ("python3 lint.py", ""),
        ("go build ./...", ""),
    ],
)
def test_the_runner_of_a_check_command(command: str, runner: str) -> None:
    assert runner_of(command) == runner


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    full.update({"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **(env or {})})
    proc = subprocess.run(
        argv, cwd=cwd, env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    return proc.stdout


TESTS = (
    "import pytest\n\n\ndef test_a():\n    assert 1 == 2\n\n\ndef test_b():\n    pass\n\n\n"
    "@pytest.mark.skip\ndef test_c():\n    pass\n\n\n"
    "@pytest.mark.xfail\ndef test_d():\n    assert False\n"
)


def test_pytests_printed_summary(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(TESTS)
    py = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
    out = _run([*py, "-q", "-k", "not test_b"], tmp_path)
    counted = count("pytest -q", out)
    assert counted is not None
    # xfailed is counted with the skipped: a test that did not pass or fail.
    assert (counted.ran, counted.passed, counted.failed, counted.skipped) == (1, 0, 1, 2)
    assert counted.deselected == 1
    collected = count("pytest", _run([*py, "-q", "--collect-only"], tmp_path))
    assert collected is not None and collected.ran == 0
    # Quieter still, pytest prints no count at all: nothing can be read from the output.
    assert count("pytest", _run([*py, "-qq", "--collect-only"], tmp_path)) is None


def test_unittests_printed_summary(tmp_path: Path) -> None:
    (tmp_path / "test_y.py").write_text(
        "import unittest\n\n\nclass T(unittest.TestCase):\n"
        "    def test_a(self):\n        self.assertEqual(1, 2)\n\n"
        "    def test_b(self):\n        pass\n\n"
        "    @unittest.skip('later')\n    def test_c(self):\n        pass\n"
    )
    out = _run([sys.executable, "-m", "unittest", "test_y"], tmp_path)
    counted = count("python -m unittest", out)
    assert counted is not None
    assert (counted.ran, counted.passed, counted.failed, counted.skipped) == (2, 1, 1, 1)


@pytest.mark.parametrize(
    "command,output,expected",
    [
        (
            "go test -v ./...",
            "=== RUN   TestA\n--- PASS: TestA (0.00s)\n=== RUN   TestB\n--- FAIL: TestB (0.00s)\n"
            "--- SKIP: TestC (0.00s)\nFAIL\n",
            (2, 1, 1, 1),
        ),
        ("go test ./...", "ok  \texample.com/x\t0.002s [no tests to run]\n", None),
        ("go test ./...", "?   \texample.com/y\t[no test files]\n", (0, 0, 0, 0)),
        (
            "cargo nextest run",
            "     Summary [   0.004s] 4 tests run: 2 passed (1 slow), 1 failed, 1 timed out,"
            " 3 skipped\n",
            (4, 2, 2, 3),
        ),
        ("npx jest", "Tests:       1 failed, 1 skipped, 2 passed, 4 total\n", (3, 2, 1, 1)),
        ("npx vitest run", "      Tests  2 passed | 1 skipped | 1 todo (4)\n", (2, 2, 0, 2)),
    ],
)
def test_printed_summaries_of_runners_not_installed_here(
    command: str, output: str, expected: tuple[int, int, int, int] | None
) -> None:
    counted = count(command, output)
    if expected is None:
        # `ok` after "[no tests to run]" in another package: go printed no count to read.
        assert counted is None or counted.ran == 0
        return
    assert counted is not None
    assert (counted.ran, counted.passed, counted.failed, counted.skipped) == expected


CRATE = (
    "pub fn add(a: i32, b: i32) -> i32 { a - b }\n\n#[cfg(test)]\nmod tests {\n"
    "    use super::*;\n\n    #[test]\n    fn adds() { assert_eq!(add(2, 3), 5); }\n\n"
    "    #[test]\n    fn zero() { assert_eq!(add(0, 0), 0); }\n\n"
    "    #[test]\n    #[ignore]\n    fn later() {}\n}\n"
)


def test_cargo_tests_printed_summary_and_a_runner_that_runs_nothing(tmp_path: Path) -> None:
    cargo = shutil.which("cargo")
    if cargo is None:
        if os.environ.get("CI") == "true":
            pytest.fail("cargo is not installed (CI=true: the cargo test must run)")
        pytest.skip("cargo is not installed")
    crate = tmp_path / "adder"
    (crate / "src").mkdir(parents=True)
    (crate / "Cargo.toml").write_text(
        '[package]\nname = "adder"\nversion = "0.1.0"\nedition = "2021"\n'
    )
    (crate / "src" / "lib.rs").write_text(CRATE)
    env = {"CARGO_TARGET_DIR": str(tmp_path / "target"), "RUST_BACKTRACE": "0"}
    base = count("cargo test", _run([cargo, "test", "--offline"], crate, env))
    assert base is not None
    assert (base.ran, base.passed, base.failed, base.skipped) == (2, 1, 1, 1)
    # A cargo config in the tree that runs the test binaries through `true`: they print
    # nothing; only the doc-tests' summary (0 of them) is left.
    (crate / ".cargo").mkdir()
    (crate / ".cargo" / "config.toml").write_text(
        '[target.x86_64-unknown-linux-gnu]\nrunner = "true"\n'
    )
    asked = ask("cargo test", tmp_path / "reports", {})
    proc = subprocess.run(
        ["/bin/sh", "-c", f"{cargo} test --offline"],
        cwd=crate,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    result = CheckResult("cargo test", proc.returncode, 0.0, False, proc.stdout)
    result.tests = read(asked, proc.stdout)
    assert result.exit_code == 0, proc.stdout
    why, _ = weaker(base, result)
    assert why == "no tests ran (cargo)", why


def _counts(ran: int, passed: int, skipped: int = 0, **ids: list[str]) -> TestCounts:
    return TestCounts(
        runner="pytest", ran=ran, passed=passed, failed=ran - passed, skipped=skipped, **ids
    )


@pytest.mark.parametrize(
    "base,now,why",
    [
        (None, None, ""),
        (_counts(2, 1), _counts(0, 0), "no tests ran (pytest)"),
        (None, _counts(0, 0), "no tests ran (pytest)"),
        (None, _counts(3, 3), ""),
        (_counts(2, 1), _counts(2, 2), ""),
        (_counts(3, 3), _counts(2, 2), "2 ran where the base ran 3; 2 passed where the base had 3"),
        (_counts(2, 1), _counts(2, 1, skipped=1), "1 skipped where the base had 0"),
        (
            _counts(2, 1, executed=["t::a", "t::b"]),
            _counts(2, 2, executed=["t::a", "t::c"], not_run=["t::b"], skipped=1),
            "1 skipped where the base had 0; 1 the base ran now skipped or xfailed: t::b",
        ),
        (
            _counts(2, 1, executed=["t::a", "t::b"]),
            _counts(2, 2, executed=["t::a", "t::c"]),
            "1 the base ran did not run: t::b",
        ),
        (
            _counts(2, 1),
            TestCounts(runner="pytest", unreadable="junit.xml was not written"),
            "loopd could not count what pytest ran: junit.xml was not written",
        ),
        (
            _counts(2, 1),
            _counts(2, 2, tampered=["t::a (raised, but the report says passed)"]),
            "pytest's report does not match what ran: t::a (raised, but the report says passed)",
        ),
    ],
)
def test_why_one_count_tests_less_than_another(
    base: TestCounts | None, now: TestCounts | None, why: str
) -> None:
    assert weakened(base, now) == why


def test_many_ids_are_named_up_to_five_and_counted() -> None:
    base = _counts(8, 8, executed=[f"t::{n}" for n in range(8)])
    now = _counts(8, 8, executed=[f"u::{n}" for n in range(8)])
    assert weakened(base, now) == (
        "8 the base ran did not run: t::0, t::1, t::2, t::3, t::4 and 3 more"
    )


def _all(counted: TestCounts | None) -> tuple[str, int, int, int, int, int] | None:
    """A count whole: runner, ran, passed, failed, skipped, deselected."""
    if counted is None:
        return None
    c = counted
    return (c.runner, c.ran, c.passed, c.failed, c.skipped, c.deselected)


@pytest.mark.parametrize(
    "command,output,expected",
    [
        # pytest: xpassed counts as passed, errors as failed, xfailed as skipped; warnings
        # are no tests; only the last summary line counts (a plugin that reruns prints two).
        (
            "pytest",
            "==== 2 failed, 3 passed, 1 skipped, 2 deselected, 1 xfailed, 1 xpassed, "
            "2 warnings, 1 error in 0.12s ====\n",
            ("pytest", 7, 4, 3, 2, 2),
        ),
        ("pytest", "= 1 passed, 2 errors in 0.50s =\n", ("pytest", 3, 1, 2, 0, 0)),
        ("pytest", "1 passed, 1 failed in 0.01s\n", ("pytest", 2, 1, 1, 0, 0)),
        ("pytest", "= 1 passed, 1 skipped in 0.01s =\n", ("pytest", 1, 1, 0, 1, 0)),
        ("pytest", "== 1 failed in 0.02s ==\n", ("pytest", 1, 0, 1, 0, 0)),
        (
            "pytest",
            "= 1 failed in 0.02s =\nrerun:\n= 2 passed in 0.03s =\n",
            ("pytest", 2, 2, 0, 0, 0),
        ),
        ("pytest", "====== 3 deselected in 0.01s ======\n", ("pytest", 0, 0, 0, 0, 3)),
        ("pytest", "no tests ran in 0.01s\n", ("pytest", 0, 0, 0, 0, 0)),
        ("pytest", "4 tests collected in 0.01s\n", ("pytest", 0, 0, 0, 0, 0)),
        ("pytest", "ERROR: file or directory not found: tests/\n", None),
        # unittest: skips did not run; expected failures passed nothing and failed nothing.
        (
            "python -m unittest",
            "Ran 5 tests in 0.010s\n\nFAILED (failures=1, errors=1, skipped=1, "
            "expected failures=1)\n",
            ("unittest", 4, 1, 2, 1, 0),
        ),
        (
            "python -m unittest",
            "Ran 1 test in 0.001s\n\nFAILED (failures=1)\n",
            ("unittest", 1, 0, 1, 0, 0),
        ),
        ("python -m unittest", "Ran 2 tests in 0.001s\n\nOK\n", ("unittest", 2, 2, 0, 0, 0)),
        (
            "python -m unittest",
            "Ran 0 tests in 0.000s\n\nNO TESTS RAN\n",
            ("unittest", 0, 0, 0, 0, 0),
        ),
        ("python -m unittest", "ImportError: no module named x\n", None),
        # go: with -v the cases; without, "[no test files]" alone says nothing ran, and any
        # package's `ok` line (not necessarily the first) says go printed no count.
        (
            "go test -v ./...",
            "=== RUN   TestA\n--- PASS: TestA (0.00s)\n--- SKIP: TestC (0.00s)\nok  \tx\t0.01s\n",
            ("go", 1, 1, 0, 1, 0),
        ),
        ("go test ./...", "?   \tx/a\t[no test files]\nok  \tx/b\t0.01s\n", None),
        ("go test ./...", "ok  \tx/b\t0.01s [no tests to run]\n", ("go", 0, 0, 0, 0, 0)),
        ("go test ./...", "FAIL\tx [build failed]\n", None),
        # cargo: every test binary's result line summed (filtered out: deselected).
        (
            "cargo test",
            "test result: FAILED. 3 passed; 1 failed; 2 ignored; 0 measured; 4 filtered out;"
            " finished in 0.01s\n\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured;"
            " 0 filtered out; finished in 0.00s\n",
            ("cargo", 5, 4, 1, 2, 4),
        ),
        (
            "cargo nextest run",
            "     Summary [   0.01s] 2 tests run: 2 passed\n",
            ("cargo", 2, 2, 0, 0, 0),
        ),
        (
            "cargo nextest run",
            "   Summary [0.01s] 1 test run: 1 failed\n",
            ("cargo", 1, 0, 1, 0, 0),
        ),
        ("cargo test", "error[E0425]: cannot find value\n", None),
        ("npx jest", "Tests:       2 failed, 2 total\n", ("jest", 2, 0, 2, 0, 0)),
        ("npx jest", "Tests:       1 todo, 3 passed, 4 total\n", ("jest", 3, 3, 0, 1, 0)),
        ("npx jest", "no summary\n", None),
        ("npx vitest run", "      Tests  1 failed (1)\n", ("vitest", 1, 0, 1, 0, 0)),
        ("npx vitest run", "no summary\n", None),
        ("make test", "1 passed in 0.01s\n", None),
    ],
)
def test_each_runners_summary_counted_whole(
    command: str, output: str, expected: tuple[str, int, int, int, int, int] | None
) -> None:
    assert _all(count(command, output)) == expected


@pytest.mark.parametrize(
    "command,runner",
    [
        ("python -m", ""),  # -m with nothing after it
        ("echo unittest", ""),  # unittest named, not run as a module
        ("go", ""),
        ("cd sub && go", ""),
        ("go test", "go"),
        ("cargo", ""),
        ("cargo build", ""),
        ("pytest -k 'unclosed", "pytest"),  # a quote shlex cannot close: words as split
        ("python3 -m unittest -v", "unittest"),
    ],
)
def test_the_runner_of_commands_at_the_edges(command: str, runner: str) -> None:
    assert runner_of(command) == runner


def test_ids_named_are_five_and_no_more_is_said_of_exactly_five() -> None:
    base = _counts(5, 5, executed=[f"t::{n}" for n in range(5)])
    now = _counts(5, 5, executed=[f"u::{n}" for n in range(5)])
    assert weakened(base, now) == "5 the base ran did not run: t::0, t::1, t::2, t::3, t::4"


def test_more_deselected_is_weaker_and_a_printed_count_is_weighed_by_counts_only() -> None:
    base = _counts(2, 2)
    now = TestCounts(runner="pytest", ran=2, passed=2, deselected=3)
    assert weakened(base, now) == "3 deselected where the base had 0"
    # The base was read from a report (ids), the attempt from a printed summary (none):
    # the same counts, so nothing is said of ids that could not be compared.
    reported = _counts(2, 2, executed=["t::a", "t::b"])
    assert weakened(reported, _counts(2, 2)) == ""
