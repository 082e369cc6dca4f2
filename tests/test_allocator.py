"""glibc's allocator settings for the long-lived daemon (#41's RSS creep)."""

from __future__ import annotations

import subprocess
import sys

from daemon.allocator import Trimmer


def test_the_arena_limit_is_taken_on_glibc() -> None:
    # In a child: the limit holds for the whole process, and the tests' process keeps its own.
    code = "from daemon.allocator import limit_arenas; print(limit_arenas(2))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "True"


def test_a_trim_after_runs_at_most_once_a_minute() -> None:
    trimmer = Trimmer(every=60.0)
    assert trimmer.after_runs(1000.0) is True
    assert trimmer.after_runs(1030.0) is False
    assert trimmer.after_runs(1059.9) is False
    assert trimmer.after_runs(1060.0) is True
