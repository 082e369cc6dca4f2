"""The suite's own scheduling: `--dist loadgroup` keeps the tests of one `xdist_group` on one
worker, so a module's expensive fixture (a daemon, Chromium, a night of runs) is made once.

A pytest release once made pytest-xdist ignore the marks without a word (every group's tests
spread over the workers, each making its fixture again): this runs a small session the way
.ci/run runs the suite and reads which worker ran each test.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

GROUPED = """
import os

import pytest

GROUP = pytest.mark.xdist_group("shared")


@GROUP
def test_first():
    print("ran on", os.environ["PYTEST_XDIST_WORKER"])


def test_alone_one():
    pass


def test_alone_two():
    pass


@GROUP
def test_second():
    pass
"""


def test_loadgroup_runs_a_groups_tests_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2"]
        + ["--dist", "loadgroup", "-v", "test_grouped.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    passed = re.findall(r"\[(gw\d)\] .*PASSED test_grouped\.py::(\w+)", proc.stdout)
    ran = {test: worker for worker, test in passed}
    assert set(ran) == {"test_first", "test_second", "test_alone_one", "test_alone_two"}, (
        proc.stdout
    )
    assert ran["test_first"] == ran["test_second"], proc.stdout
