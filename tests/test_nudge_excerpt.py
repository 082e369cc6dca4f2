"""A nudge (and the next attempt's prompt) keeps the head, the first failure and the tail of
a long check output, within the budget the tail alone had."""

from __future__ import annotations

import json
from pathlib import Path

from daemon.runs.checks import TAIL_BYTES
from daemon.runs.excerpt import excerpt, first_failure
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
    assert len(nudge) < TAIL_BYTES + 1000  # the nudge's own words and the fence besides
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
