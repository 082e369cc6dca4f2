"""A long check output cut to a budget: the lines that name failures first, then its end.

Keeping only the tail drops what matters most when a test runner prints a lot: the first
failing test (or error line) is often far from the end, and the tail is then kilobytes of
passing tests or repeated subtests. One excerpt serves every place a check's output is shown
within a budget: the nudge, the next attempt's prompt, the critic's evidence, the
escalation, the checks.log a worker sends its home. Whole lines are kept, in their order;
what is cut between them is marked with its count of lines and characters. Within the
budget, in this order of need:
1. the runner's summary line (the last one: `=== 1 failed, 3 passed in 0.12s ===`);
2. the first failing line with a few lines before it and what follows it (its traceback);
3. every other line that names a failure (FAILED, ERROR, Error, Traceback, assert, panicked,
   `E   ...` lines), one line each;
4. the last lines;
5. the first lines (the command's setup, what ran).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# The first line a person would look at in a failing run: test runners' failure headers and
# markers (pytest, unittest, go, TAP, jest/mocha, cargo), tracebacks, exception lines,
# compiler diagnostics. The earliest match wins.
FIRST_FAILURE = re.compile(
    r"^(?:=+ (?:FAILURES|ERRORS) =+\s*$"
    r"|_{3,} .+ _{3,}\s*$"
    r"|(?:FAILED|ERROR)\b"
    r"|(?:FAIL|ERROR):"
    r"|--- FAIL:"
    r"|not ok\b"
    r"|Traceback \(most recent call last\)"
    r"|E {2,}\S"
    r"|\s*(?:FAIL|✕|✗|×)\s+\S"
    r"|thread '.*' panicked at"
    r"|npm ERR!"
    r"|error(?:\[\w+\])?:)"
    r"|^.*?\b\w*(?:Error|Exception)\b: "
    r"|^\S+:\d+(?::\d+)?: (?:fatal )?error\b",
    re.MULTILINE,
)
# A line that names a failure anywhere in it.
NAMES_FAILURE = re.compile(
    r"\b(?:FAILED|FAIL|ERROR|Traceback|panicked|assert)\b|\w(?:Error|Exception)\b|^E {2,}\S"
    r"|\berror(?:\[\w+\])?:|^not ok\b"
)
# A test runner's summary of the run: pytest, unittest, go, cargo, jest, mocha, RSpec, TAP.
SUMMARY = re.compile(
    r"^=+ .*\b(?:passed|failed|errors?|skipped|no tests ran)\b.*=+\s*$"
    r"|^\d+ (?:passed|failed)\b.* in [\d.]+\s*s"
    r"|^(?:FAILED|OK) \((?:failures|errors|skipped)="
    r"|^Ran \d+ tests? in "
    r"|^test result: "
    r"|^(?:ok|FAIL)\s+\S+\s+[\d.]+s\s*$"
    r"|^\s*Tests?:\s+.*\b(?:failed|passed|total)\b"
    r"|^\s*\d+ (?:passing|failing)\b"
    r"|^\d+ examples?, \d+ failures?"
    r"|^# (?:pass|fail)\s+\d+"
)
CONTEXT_LINES = 2  # lines kept before the first failure
FAILURE_SHARE = 0.4  # of the budget, for the first failure and what follows it
NAMED_SHARE = 0.2  # for the other lines that name failures
TAIL_SHARE = 0.3  # for the last lines; the head takes what is left, then the tail again
LONG_LINE = 0.25  # of the budget: a longer line is kept cut at both ends


def cut_marker(lines: int, chars: int) -> str:
    """The marker left where `lines` lines of `chars` characters were cut."""
    return f"[... {lines} lines, {chars} characters cut ...]\n"


def first_failure(text: str) -> int | None:
    """Where the line of the first failure starts, or None when no line looks like one."""
    match = FIRST_FAILURE.search(text)
    if match is None:
        return None
    return text.rfind("\n", 0, match.start()) + 1


def kept_lines(lines: list[str], limit: int) -> list[int]:
    """The indices of `lines` (each with its newline) an excerpt within `limit` keeps."""
    if sum(len(line) for line in lines) <= limit:
        return list(range(len(lines)))
    picker = _Picker(lines, limit)
    summaries = [i for i, line in enumerate(lines) if SUMMARY.search(line)]
    if summaries:
        picker.take([summaries[-1]], limit)
    first = next((i for i, line in enumerate(lines) if FIRST_FAILURE.search(line)), None)
    if first is not None:
        block = range(max(0, first - CONTEXT_LINES), len(lines))
        picker.take([first, *block], int(limit * FAILURE_SHARE))
    named = [i for i, line in enumerate(lines) if NAMES_FAILURE.search(line)]
    picker.take(named, int(limit * NAMED_SHARE))
    picker.take(range(len(lines) - 1, -1, -1), int(limit * TAIL_SHARE))
    picker.take(range(len(lines)), limit)
    picker.take(range(len(lines) - 1, -1, -1), limit)
    return sorted(picker.kept)


class _Picker:
    """Lines taken in order of need while their cost, markers included, fits the budget."""

    def __init__(self, lines: list[str], limit: int) -> None:
        self.lines = lines
        self.limit = limit
        self.kept: set[int] = set()
        # No marker is longer than the one for every line cut; at first one gap is all.
        self.marker = len(cut_marker(len(lines), sum(map(len, lines))))
        self.spent = self.marker

    def cost(self, i: int) -> int:
        """A line's characters and the markers it adds or saves: it splits the gap it is in
        in two (both neighbours cut), shortens it (one), or closes it (none)."""
        cut = [j for j in (i - 1, i + 1) if 0 <= j < len(self.lines) and j not in self.kept]
        return min(len(self.lines[i]), int(self.limit * LONG_LINE)) + self.marker * (len(cut) - 1)

    def take(self, order: Iterable[int], share: int) -> None:
        """Take the lines of `order` not yet kept, while `share` and the budget last."""
        used = 0
        for i in order:
            if i in self.kept:
                continue
            cost = self.cost(i)
            if used + cost > share or self.spent + cost > self.limit:
                break
            self.kept.add(i)
            used += cost
            self.spent += cost


def excerpt(text: str, limit: int) -> str:
    """`text` when it fits in `limit` characters; else the lines an excerpt keeps (see the
    module docstring), in order, with a marker for each gap, within `limit`."""
    if len(text) <= limit:
        return text
    lines = text.splitlines(keepends=True)
    kept = kept_lines(lines, limit)
    out: list[str] = []
    at = 0
    for i in kept:
        if i > at:
            out.append(cut_marker(i - at, sum(len(line) for line in lines[at:i])))
        out.append(_short(lines[i], int(limit * LONG_LINE)))
        at = i + 1
    if at < len(lines):
        out.append(cut_marker(len(lines) - at, sum(len(line) for line in lines[at:])))
    joined = "".join(out)
    return joined if len(joined) <= limit else joined[: max(0, limit - 1)] + "\n"


def _short(line: str, most: int) -> str:
    """A line within `most` characters: its two ends, the middle marked."""
    if len(line) <= most:
        return line
    marker = f" [... {len(line) - most} characters cut ...] "
    keep = max(0, most - len(marker))
    head = keep // 2
    end = "\n" if line.endswith("\n") else ""
    body = line.rstrip("\n")
    return body[:head] + marker + body[len(body) - (keep - head) :] + end
