"""How many tests a check ran, passed, skipped and deselected, read from its runner's summary.

The runners loopd recognises in a check command, and the summary each prints:
- pytest (`pytest`, `py.test`, `python -m pytest`): `3 passed, 1 skipped, 2 deselected in
  0.1s`, `no tests ran`, `5 tests collected` (nothing ran: `--collect-only`);
- unittest (`python -m unittest`): `Ran 3 tests` then `OK (skipped=1)` or `FAILED (...)`;
- go test: with `-v` the `--- PASS/FAIL/SKIP` lines; without, only `[no tests to run]` and
  `[no test files]` say something;
- cargo test: each `test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 2 filtered out`;
  cargo nextest: `Summary [   0.01s] 3 tests run: 2 passed, 1 failed, 1 skipped`;
- jest (`Tests: 1 skipped, 2 passed, 3 total`) and vitest (`Tests  2 passed | 1 skipped (3)`).

A check whose command names none of them, or whose output has no summary, is not counted.
"""

from __future__ import annotations

import re
import shlex

from daemon.state.records import TestCounts as TestCounts

RUNNERS = ("pytest", "unittest", "go", "cargo", "jest", "vitest")


def runner_of(command: str) -> str:
    """The test runner a check command starts, or ""."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    names = [w.rsplit("/", 1)[-1] for w in words]
    for i, name in enumerate(names):
        if name in ("pytest", "py.test"):
            return "pytest"
        if name == "-m" and i + 1 < len(names):
            if names[i + 1] == "pytest":
                return "pytest"
            if names[i + 1] == "unittest":
                return "unittest"
        if name == "go" and i + 1 < len(names) and names[i + 1] == "test":
            return "go"
        if name == "cargo" and i + 1 < len(names) and names[i + 1] in ("test", "nextest"):
            return "cargo"
        if name in ("jest", "vitest"):
            return name
    return ""


_PYTEST_WORDS = re.compile(
    r"(\d+) (passed|failed|skipped|deselected|xfailed|xpassed|errors?|warnings?)"
)
_PYTEST_LINE = re.compile(r"^[= ]*(?:\d+ \w+(?:, )?)+.* in [\d.]+s", re.M)
_PYTEST_NONE = re.compile(r"^[= ]*no tests ran\b", re.M)
_PYTEST_COLLECTED = re.compile(
    r"^[= ]*(?:(\d+)(?:/\d+)? tests? collected|no tests collected)", re.M
)
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in ", re.M)
_UNITTEST_END = re.compile(r"^(OK|FAILED)(?: \(([^)]*)\))?\s*$", re.M)
_GO_CASE = re.compile(r"^\s*--- (PASS|FAIL|SKIP): ", re.M)
_GO_NONE = re.compile(r"\[no tests to run\]|\[no test files\]")
_CARGO = re.compile(
    r"^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored; \d+ measured; "
    r"(\d+) filtered out",
    re.M,
)
_JEST = re.compile(r"^Tests:\s+(.*\d+ total)\s*$", re.M)
_VITEST = re.compile(r"^\s*Tests\s+(.*)\((\d+)\)\s*$", re.M)


def count(command: str, output: str) -> TestCounts | None:
    """The counts of the check's runner in its output; None when it cannot be told."""
    runner = runner_of(command)
    reader = _READERS.get(runner)
    return reader(output) if reader else None


def _pytest(output: str) -> TestCounts | None:
    lines = _PYTEST_LINE.findall(output)
    if lines:
        found: dict[str, int] = {}
        for number, word in _PYTEST_WORDS.findall(lines[-1]):
            key = word.rstrip("s") if word.startswith("error") else word
            found[key] = found.get(key, 0) + int(number)
        passed = found.get("passed", 0) + found.get("xpassed", 0)
        failed = found.get("failed", 0) + found.get("error", 0)
        skipped = found.get("skipped", 0) + found.get("xfailed", 0)
        ran = passed + failed + skipped
        if ran or found.get("deselected"):
            return TestCounts(
                runner="pytest",
                ran=passed + failed,
                passed=passed,
                failed=failed,
                skipped=skipped,
                deselected=found.get("deselected", 0),
            )
    if _PYTEST_NONE.search(output) or _PYTEST_COLLECTED.search(output):
        return TestCounts(runner="pytest")  # collected only, or nothing: no test ran
    return None


def _unittest(output: str) -> TestCounts | None:
    ran = _UNITTEST_RAN.findall(output)
    if not ran:
        return None
    total = int(ran[-1])
    ends = _UNITTEST_END.findall(output)
    details = dict.fromkeys(("failures", "errors", "skipped", "expected failures"), 0)
    if ends:
        for item in ends[-1][1].split(","):
            key, _, value = item.strip().partition("=")
            if key in details and value.isdigit():
                details[key] = int(value)
    skipped = details["skipped"]
    failed = details["failures"] + details["errors"]
    return TestCounts(
        runner="unittest",
        ran=total - skipped,
        passed=max(0, total - skipped - failed - details["expected failures"]),
        failed=failed,
        skipped=skipped,
    )


def _go(output: str) -> TestCounts | None:
    cases = _GO_CASE.findall(output)
    if cases:
        passed, failed, skipped = (cases.count(k) for k in ("PASS", "FAIL", "SKIP"))
        return TestCounts(
            runner="go", ran=passed + failed, passed=passed, failed=failed, skipped=skipped
        )
    if _GO_NONE.search(output) and not re.search(r"^ok\s+\S+\s+[\d.]+s\s*$", output, re.M):
        return TestCounts(runner="go")
    return None


_NEXTEST = re.compile(r"^\s*Summary \[[^\]]*\]\s+(\d+) tests? run: (.*)$", re.M)


def _cargo(output: str) -> TestCounts | None:
    found = _CARGO.findall(output)
    if not found:
        return _nextest(output)
    passed = sum(int(f[0]) for f in found)
    failed = sum(int(f[1]) for f in found)
    return TestCounts(
        runner="cargo",
        ran=passed + failed,
        passed=passed,
        failed=failed,
        skipped=sum(int(f[2]) for f in found),
        deselected=sum(int(f[3]) for f in found),
    )


def _nextest(output: str) -> TestCounts | None:
    found = _NEXTEST.findall(output)
    if not found:
        return None
    words = dict.fromkeys(("passed", "failed", "timed out", "skipped"), 0)
    for number, word in re.findall(r"(\d+) (passed|failed|timed out|skipped)", found[-1][1]):
        words[word] = int(number)
    passed, failed = words["passed"], words["failed"] + words["timed out"]
    return TestCounts(
        runner="cargo",
        ran=passed + failed,
        passed=passed,
        failed=failed,
        skipped=words["skipped"],
    )


def _words(runner: str, text: str) -> TestCounts:
    found = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|todo)", text)}
    passed, failed = found.get("passed", 0), found.get("failed", 0)
    skipped = found.get("skipped", 0) + found.get("todo", 0)
    return TestCounts(
        runner=runner, ran=passed + failed, passed=passed, failed=failed, skipped=skipped
    )


def _jest(output: str) -> TestCounts | None:
    found = _JEST.findall(output)
    return _words("jest", found[-1]) if found else None


def _vitest(output: str) -> TestCounts | None:
    found = _VITEST.findall(output)
    return _words("vitest", found[-1][0]) if found else None


_READERS = {
    "pytest": _pytest,
    "unittest": _unittest,
    "go": _go,
    "cargo": _cargo,
    "jest": _jest,
    "vitest": _vitest,
}


SHOWN = 5  # test ids named in a reason; the rest are counted


def _named(tests: list[str]) -> str:
    shown = ", ".join(tests[:SHOWN])
    return shown + (f" and {len(tests) - SHOWN} more" if len(tests) > SHOWN else "")


def weakened(base: TestCounts | None, now: TestCounts | None) -> str:
    """Why `now` tests less than `base` ("" when it does not): its count is unreadable, its
    report was tampered with, no test ran, fewer ran or passed, more skipped or deselected, or
    tests the base executed were skipped, xfailed or not run (by id, where both were reports)."""
    if now is None:
        return ""
    if now.unreadable:
        return f"loopd could not count what {now.runner} ran: {now.unreadable}"
    if now.tampered:
        return f"{now.runner}'s report does not match what ran: {_named(now.tampered)}"
    if now.ran == 0:
        return f"no tests ran ({now.runner})"
    if base is None or base.unreadable:
        return ""
    why = []
    if now.ran < base.ran:
        why.append(f"{now.ran} ran where the base ran {base.ran}")
    if now.passed < base.passed:
        why.append(f"{now.passed} passed where the base had {base.passed}")
    if now.skipped > base.skipped:
        why.append(f"{now.skipped} skipped where the base had {base.skipped}")
    if now.deselected > base.deselected:
        why.append(f"{now.deselected} deselected where the base had {base.deselected}")
    if base.executed and (now.executed or now.not_run):
        ran, not_run = set(now.executed), set(now.not_run)
        lost = [t for t in base.executed if t not in ran]
        skipped = [t for t in lost if t in not_run]
        gone = [t for t in lost if t not in not_run]
        if skipped:
            why.append(f"{len(skipped)} the base ran now skipped or xfailed: {_named(skipped)}")
        if gone:
            why.append(f"{len(gone)} the base ran did not run: {_named(gone)}")
    return "; ".join(why)
