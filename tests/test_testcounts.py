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

from daemon.runs.checks import CheckResult
from daemon.runs.testcounts import count, runner_of, weakened
from daemon.runs.testreports import ask, read
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
