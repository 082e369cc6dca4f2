"""A failing check's output digest (runparts/checks.py `output_digest`): the same failure told
again is the same digest, whatever the runner's timings and the tree's folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from daemon.runparts.checks import CheckResult, output_digest


def _pytest(tree: Path) -> CheckResult:
    """Real pytest in `tree`, as a check: its exit code and output."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return CheckResult("pytest -q", done.returncode, 0.1, False, done.stdout + done.stderr)


def _tree(folder: Path, test: str) -> Path:
    folder.mkdir()
    (folder / "test_app.py").write_text(test)
    return folder


MISSING = "import not_installed_anywhere_xyz\n\ndef test_it():\n    assert True\n"


def test_a_collection_error_told_twice_in_two_trees_is_one_digest(tmp_path: Path) -> None:
    first, second = _tree(tmp_path / "a", MISSING), _tree(tmp_path / "bb", MISSING)
    one, two = _pytest(first), _pytest(second)
    assert one.exit_code == two.exit_code == 2, one.output
    assert " in " in one.output and "s\n" in one.output  # pytest printed its timing
    assert output_digest(one, [str(first)]) == output_digest(two, [str(second)])


def test_timings_are_read_as_one_but_other_numbers_are_not(tmp_path: Path) -> None:
    def digest(text: str) -> str:
        return output_digest(CheckResult("x", 1, 0.1, False, text))

    assert digest("1 error in 0.05s\n") == digest("1 error in 12.31s (0:00:12)\n")
    assert digest("Ran 3 tests in 0.001s\n") == digest("Ran 3 tests in 0.120s\n")
    assert digest("--- FAIL: TestAdd (0.00s)\n") == digest("--- FAIL: TestAdd (1.50s)\n")
    assert digest("Time: 1.234 s\n") == digest("Time: 0.5 s\n")
    # A different failure is a different digest: counts, values and exit codes stay.
    assert digest("1 error in 0.05s\n") != digest("2 errors in 0.05s\n")
    assert digest("assert 3 == 4\n") != digest("assert 3 == 5\n")
    assert output_digest(CheckResult("x", 1, 0.1, False, "e")) != output_digest(
        CheckResult("x", 2, 0.1, False, "e")
    )
    # A passed check has no digest: nothing to tell again.
    assert output_digest(CheckResult("x", 0, 0.1, False, "ok in 0.1s")) == ""
