"""The shipped calibration set: frozen by its sha256, its labels verified by running tests."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tomllib

from daemon.calibration.cases import SHIPPED, load_cases
from tests.helpers import ROOT

# Rebuilding the set (tests/data/calibration/build.py) changes this on purpose only.
CASES_SHA256 = "6b1c0e5289d7d425e8f89862172e97fc35d85b8d0ae9721960012d44cae399fe"
BUILDER = ROOT / "tests" / "data" / "calibration" / "build.py"
KINDS = {"good", "reverted", "skipped", "deleted", "partial", "ignored", "unrelated"}


def digest() -> str:
    """The sha256 of every file of the shipped set, by path."""
    sha = hashlib.sha256()
    for path in sorted(p for p in SHIPPED.rglob("*") if p.is_file()):
        sha.update(str(path.relative_to(SHIPPED)).encode() + b"\0" + path.read_bytes() + b"\0")
    return sha.hexdigest()


def test_the_shipped_set_is_the_one_that_was_built_and_verified() -> None:
    assert digest() == CASES_SHA256


def test_every_bug_has_one_good_and_six_bad_attempts_with_a_source() -> None:
    cases = load_cases()
    assert len(cases) >= 60
    by_bug: dict[str, set[str]] = {}
    for case in cases:
        meta = tomllib.loads((case.folder / "case.toml").read_text())
        assert meta["repository"] and meta["reference"].startswith("https://github.com/")
        assert case.label == ("good" if case.kind == "good" else "bad"), case.id
        assert case.summary.startswith("Fixed"), case.id  # every attempt claims success
        by_bug.setdefault(meta["bug"], set()).add(case.kind)
    assert len(by_bug) >= 10 and all(kinds == KINDS for kinds in by_bug.values())


def test_the_labels_agree_with_the_recorded_checks() -> None:
    for case in load_cases():
        log = (case.folder / "checks.log").read_text()
        assert log.rstrip().endswith("[exit 0]" if case.checks_passed else "]"), case.id
        if case.label == "good":
            assert case.checks_passed and "skipped" not in log, case.id


def test_a_rebuild_of_one_bug_runs_its_tests_and_gives_the_same_cases() -> None:
    done = subprocess.run(
        [sys.executable, str(BUILDER), "--check", "--only", "mitmproxy-empty-binary"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7 cases rebuilt; labels verified" in done.stdout
