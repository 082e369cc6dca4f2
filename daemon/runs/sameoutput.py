"""A check whose failing output is the same before and after the agent's edits, for a reason
no edit mends: the environment's failure (cause `environment`), said at once, no nudge spent.

The checks' run on the base (the `skip_if_done` check, `checktree.done_already`) keeps a
digest of each failing check's output (`run.base_failures`). When the checks run after an
agent's session and a check fails, its output is compared with the base's. Identical output
alone is no proof: a real bug the agent did not mend fails the same way every time. So all of
these must hold, and the rule is this narrow on purpose (docs/troubleshooting.md, "A check
that cannot run"):

- the output is byte for byte the base's (same check, same command);
- the agent changed files (an agent that changed nothing leaves the same output for its own
  reason: that is `stopped_early`, nudged as before);
- the output names none of the files the agent changed, by path or by name (when it does,
  the agent's work is in play);
- its last error line is of an environmental kind (ENVIRONMENTAL: a module, file, program or
  shared library not found, permission denied, a connection refused or a name that does not
  resolve), and what it names is not a file the agent changed or added. An assertion, a
  test runner's failed tests or any other error is never taken for the environment's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Protocol

from daemon.git.diffs import numstat
from daemon.git.tree import RunTree, check_folders
from daemon.runparts.checks import ChecksResult, output_digest

ENVIRONMENTAL = re.compile(
    r"(?:ModuleNotFoundError|ImportError): No module named '?(?P<module>[\w.]+)"
    r"|(?:FileNotFoundError|PermissionError|IsADirectoryError)\b.*?'(?P<path>[^']+)'"
    r"|: (?P<program>[^\s:]+): (?:command )?not found\s*$"
    r"|(?P<lib>\S+\.so[\d.]*): cannot open shared object file"
    r"|Permission denied"
    r"|Connection refused|ConnectionRefusedError|Temporary failure in name resolution"
    r"|Name or service not known|Network is unreachable",
    re.M,
)
# A line that says what failed: an exception, an error, a shell's complaint.
ERROR_LINE = re.compile(r"(?:^[\w.]*(?:Error|Exception)\b|error|not found|denied|refused)", re.I)


class Checked(Protocol):
    """The checks that ran on a commit after a session (runs/sessions.py's CheckedCommit)."""

    commit: str
    checks: ChecksResult


def same_as_base(tree: RunTree, base: str, base_failures: Sequence[str], checked: Checked) -> str:
    """`unchanged_failure` for the checks that ran on `checked.commit` in the run's `tree`:
    the files the agent changed since `base`, the tree's folders read as `{tree}`."""
    if not any(base_failures) or not base or tree.own_dir is None:
        return ""  # no failing base kept (a retry, a forced run), or no check tree here
    stat = numstat(tree.own.bare, base, checked.commit)
    trees = (str(check_folders(tree.own_dir)[0]), str(tree.path))
    return unchanged_failure(checked.checks, base_failures, [f.path for f in stat.files], trees)


def unchanged_failure(
    checks: ChecksResult, base: Sequence[str], changed: Sequence[str], trees: Sequence[str]
) -> str:
    """The run's reason when a check fails the same way it failed on the base for an
    environmental reason, though the agent changed files; "" when none does. `trees`: the
    run's tree folders here, read as `{tree}` (checks.output_digest)."""
    if not changed:
        return ""
    for i, result in enumerate(checks.results):
        if i >= len(base) or not base[i] or output_digest(result, trees) != base[i]:
            continue
        what = _environmental(result.output, changed)
        if what:
            files = ", ".join(changed[:5]) + (", ..." if len(changed) > 5 else "")
            return (
                f"done_when[{i}] `{result.command}`: its output is the same before and after "
                f"the agent's edits ({files}): {what}. The agent's changes do not reach what "
                "fails; fix the checks' environment (`loopd check --run-checks` runs them on "
                "the base)"
            )
    return ""


def _environmental(output: str, changed: Sequence[str]) -> str:
    """The output's last error line when it is environmental and names nothing the agent
    changed ("" otherwise)."""
    if any(_named(output, path) for path in changed):
        return ""
    errors = [line.strip() for line in output.splitlines() if ERROR_LINE.search(line)]
    if not errors:
        return ""
    last = errors[-1]
    match = ENVIRONMENTAL.search(last)
    if match is None:
        return ""
    missing = next((g for g in match.groups() if g), "")
    stems = {PurePosixPath(p).stem for p in changed} | {PurePosixPath(p).name for p in changed}
    parts = set(re.split(r"[./]", missing)) if missing else set()
    if parts & stems:
        return ""  # what it misses is what the agent touched: its work is in play
    return last[:300]


def _named(output: str, path: str) -> bool:
    """Whether the output names the changed file `path` (its path, or its name when that is
    distinctive enough to tell)."""
    if path in output:
        return True
    name = PurePosixPath(path).name
    return (
        len(name) > 3 and re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", output) is not None
    )
