"""A nudge (and the next attempt's prompt) keeps the first failure, the lines naming
failures, the tail and the head of a long check output, within its budget
(daemon/excerpt.py); the capture itself keeps the failure of an output loopd cannot keep
whole (daemon/runparts/checks.py)."""

from __future__ import annotations

import json
from pathlib import Path

from daemon.excerpt import cut_marker, excerpt, first_failure, kept_lines
from daemon.runparts.checks import OUTPUT_CAP, TAIL_BYTES, run_check
from daemon.runs.sessions import NUDGE_CHECKS, NUDGE_OVERHEAD
from tests.helpers import loopd, make_home, make_repo, transcript_text
from tests.test_spine import agent_config, loop_file

FIRST = "FAILED tests/test_calc.py::test_add - assert add(2, 3) == 5  (first failure)"
# A check like a test runner with many subtests: a header, lots of passing tests, the first
# failure, then a flood of repeated subtest failures and a summary.
NOISY_CHECK = f"""\
import sys
print("platform linux -- the header of the run")
for i in range(3000):
    print(f"tests/test_ok.py::test_{{i}} PASSED")
print({FIRST!r})
for i in range(20000):
    print(f"SUBTEST case {{i}}: same failure again")
print("=== 1 failed, 3000 passed, 20000 subtests failed ===")
sys.exit(1)
"""
IDLE = "print('I looked and stopped')"


def test_a_nudge_keeps_the_first_failing_test_of_a_long_check_output(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"check.py": NOISY_CHECK})
    loop = loop_file(repo, max_attempts=1, max_nudges=1)
    home = make_home(tmp_path / "home", agent_config(IDLE), {"calc": loop})
    proc = loopd(home, "once", "calc", "--reason", "test", timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    attempt = home / "state" / "runs" / run_id / "attempt-1"
    lines = [json.loads(line) for line in transcript_text(attempt).splitlines()]
    [nudge] = [r["text"] for r in lines if r.get("type") == "nudge"]
    assert FIRST in nudge  # the first failing test, from the middle of 1.3 MB
    assert "platform linux -- the header of the run" in nudge  # the head
    assert "=== 1 failed, 3000 passed, 20000 subtests failed ===" in nudge  # the tail
    assert nudge.count("characters cut ...]") == 2
    assert len(nudge) < NUDGE_CHECKS + NUDGE_OVERHEAD  # the nudge's own words and the fence
    # The next attempt's prompt reads the same excerpt.
    failed = (attempt / "checks-failed.txt").read_text()
    assert FIRST in failed and len(failed) < TAIL_BYTES + 200


def test_an_output_without_a_failure_line_keeps_head_and_tail() -> None:
    text = "".join(f"line {i}\n" for i in range(10000))
    out = excerpt(text, 2000)
    assert first_failure(text) is None
    assert out.startswith("line 0\n") and out.endswith("line 9999\n") and len(out) <= 2000
    assert out.count("characters cut ...]") == 1


def test_the_earliest_failure_line_of_each_runner_is_found() -> None:
    cases = {
        "ok\n--- FAIL: TestAdd (0.00s)\n": "--- FAIL: TestAdd",
        "ok 1 - a\nnot ok 2 - b\n": "not ok 2",
        "running\nthread 'main' panicked at src/lib.rs:3:5:\n": "thread 'main' panicked",
        "cc -c x.c\nx.c:3:5: error: expected ';'\n": "x.c:3:5: error",
        'start\nTraceback (most recent call last):\n  File "x"\n': "Traceback",
        "start\n  AssertionError: add(2, 3) gave -1\n": "  AssertionError",
        "PASS a.test.js\nFAIL src/b.test.js\n": "FAIL src/b.test.js",
    }
    for text, line in cases.items():
        at = first_failure(text)
        assert at is not None and text[at:].startswith(line), (text, at)
    # Short output is never cut.
    assert excerpt("FAILED x\n", 100) == "FAILED x\n"


def test_the_lines_naming_failures_come_first_then_the_end_then_the_head() -> None:
    lines = [f"tests/test_ok.py::test_{i} PASSED\n" for i in range(20000)]
    lines[5000] = "FAILED tests/test_a.py::test_one - assert 1 == 2\n"
    lines[5001] = "E       assert 1 == 2\n"
    lines[12000] = "ERROR tests/test_b.py::test_two - RuntimeError: boom\n"
    lines[15000] = "Traceback (most recent call last):\n"
    lines.append("=== 1 failed, 19996 passed, 1 error in 12.5s ===\n")
    lines += [f"teardown {i}\n" for i in range(300)]  # a summary is not always last
    text = "".join(lines)
    for limit in (600, 2000, 8000):
        out = excerpt(text, limit)
        assert len(out) <= limit
        assert "=== 1 failed, 19996 passed, 1 error in 12.5s ===" in out
        assert "FAILED tests/test_a.py::test_one" in out
    out = excerpt(text, 8000)
    for line in (
        "E       assert 1 == 2",
        "ERROR tests/test_b.py",
        "Traceback (most",
        "teardown 299",
    ):
        assert line in out, line
    assert (
        out.index("FAILED tests/test_a") < out.index("ERROR tests/test_b") < out.index("teardown")
    )
    # Each gap is marked with what it held.
    kept = kept_lines(lines, 8000)
    gaps = [(a, b) for a, b in zip(kept, kept[1:], strict=False) if b > a + 1]
    first = gaps[0]
    held = lines[first[0] + 1 : first[1]]
    assert cut_marker(len(held), sum(map(len, held))) in out


def test_a_very_long_line_is_kept_cut_at_both_ends() -> None:
    text = "x" * 100_000 + " FAILED here " + "y" * 100_000 + "\nlast line\n"
    out = excerpt(text, 4000)
    assert len(out) <= 4000 and out.endswith("last line\n") and "characters cut ...]" in out


def test_the_capture_keeps_a_failure_before_more_output_than_it_keeps_whole(
    tmp_path: Path,
) -> None:
    """A real check printing 1.5 MB, its failure, then more than OUTPUT_CAP."""
    script = tmp_path / "noisy.py"
    script.write_text(
        "import sys\n"
        "w = sys.stdout.write\n"
        "for i in range(40000): w(f'tests/test_a.py::test_{i:06d} PASSED\\n')\n"
        f"w({FIRST!r} + '\\n')\n"
        "for i in range(60000): w(f'tests/test_b.py::test_{i:06d} PASSED\\n')\n"
        "w('=== 1 failed, 100000 passed in 9.9s ===\\n')\n"
        "sys.exit(1)\n"
    )
    result = run_check(f"python3 {script}", tmp_path, 60, {"PATH": "/usr/bin:/bin"})
    assert result.exit_code == 1
    assert len(result.output) < OUTPUT_CAP + 600_000  # bounded: head, failures, tail
    assert result.output.startswith("tests/test_a.py::test_000000 PASSED\n")
    assert FIRST in result.output
    assert "bytes of output cut here; the 1 lines among them that name failures" in result.output
    assert result.output.endswith("=== 1 failed, 100000 passed in 9.9s ===\n")
