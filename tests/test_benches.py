"""Every bench in bench/ has a --smoke mode and ends with the result line bench/all.py reads."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))
from all import Outcome, benches, table  # noqa: E402
from verdict import read_verdict, verdict  # noqa: E402

# Taken off again: bench/'s script names must not shadow anything for the other tests.
sys.path.remove(str(BENCH))


def test_each_bench_has_a_smoke_flag_and_a_verdict() -> None:
    """A new bench that bench/all.py --smoke could not run, or could not read, fails here."""
    missing = []
    for name in benches():
        tree = ast.parse((BENCH / f"{name}.py").read_text())
        strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
        calls = {
            n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and hasattr(n.func, "id")
        }
        if "--smoke" not in strings or "verdict" not in calls:
            missing.append(name)
    assert benches() and missing == []


def test_the_result_line_is_read_back(capsys: pytest.CaptureFixture[str]) -> None:
    """A missed target fails a full run's exit code, never a smoke run's; all.py reads both."""
    assert verdict("12 ms", "<= 10 ms", met=False) == 1
    assert verdict("12 ms", "<= 10 ms", met=False, smoke=True) == 0
    result = read_verdict("noise\n" + capsys.readouterr().out)
    assert result == {"figure": "12 ms", "target": "<= 10 ms", "met": False, "smoke": True}
    assert read_verdict("a bench that crashed\n") is None


def test_the_table_marks_what_did_not_complete() -> None:
    done = Outcome("fast", 0, {"figure": "1 ms", "target": "<= 2 ms", "met": True}, 1.0, "")
    crashed = Outcome("broken", 1, None, 1.0, "Traceback")
    assert table([done, crashed]).splitlines()[2:] == [
        "| `fast` | 1 ms | <= 2 ms | yes |",
        "| `broken` | did not complete (exit 1) | | no |",
    ]
    assert done.completed and not crashed.completed


def test_smoke_benches_run_side_by_side_and_keep_their_order_in_the_table() -> None:
    """`--smoke --jobs N` (CI's): several at once, the table in the benches' order; a full
    run never runs two at once (they time things)."""
    names = ["redaction", "large_artefact", "replay"]
    argv = [sys.executable, str(BENCH / "all.py"), "--smoke", "--jobs", "3", "--only", *names]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ended = [line.split(" ...")[0] for line in proc.stdout.splitlines() if " ... " in line]
    assert sorted(ended) == sorted(names)
    rows = [line.split("`")[1] for line in proc.stdout.splitlines() if line.startswith("| `")]
    assert rows == sorted(names)
    full = subprocess.run(argv[:2] + ["--jobs", "2"], capture_output=True, text=True, timeout=60)
    assert full.returncode == 2 and "only with --smoke" in full.stderr
