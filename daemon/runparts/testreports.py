"""What loopd asks a check's test runner to report of what it executed, and how it reads that.

The report goes into a folder loopd makes empty before each check, outside the tree and out
of the agent's reach (in the check tree's git directory), writable to that check alone; the
tree names no part of its path. What loopd adds to a check command, by runner:

- pytest (`pytest`, `py.test`, `python -m pytest`, `uv run pytest`, `poetry run pytest`):
  `--junitxml=FILE` appended to the command when it is one simple command, and always in
  `PYTEST_ADDOPTS` (which pytest reads after every ini file's `addopts`: a later option of
  the tree cannot move the file), with `-p loopd_witness_TOKEN`, a plugin loopd writes into
  that folder (put on PYTHONPATH) that notes each test whose call raised, before any plugin of
  the tree sees the report: a test that raised but that the JUnit XML calls passed, or that
  ran but is missing from it, is `tampered`.
- jest: `--json --outputFile=FILE`; vitest: `--reporter=default --reporter=json
  --outputFile.json=FILE`, appended to a simple command (a compound one is counted from its
  printed summary).
- go test: `-json` put right after `test` (before any `-args`) and its standard output sent to
  FILE (`> FILE`), on a simple command. What a person reads of the check stays text: the
  events' `Output` fields in order, which are what `go test -v` prints, after whatever went to
  standard error (build errors); one source, where a tee of the text would be a second one
  that the count could disagree with. A compound go command is counted from its printed
  output, as before.
- cargo test and cargo nextest, python -m unittest: their printed output (stable cargo has no
  machine-readable report).

Counts come from the report's test cases, each by its outcome, never from the totals a report
states. A recognised runner whose count cannot be read is `unreadable` and fails closed,
except go test without `-v` in a compound command, which prints no count at all.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from daemon.runparts.checks import OUTPUT_CAP
from daemon.runparts.testcounts import count, runner_of
from daemon.state.records import TestCounts

REPORT_CAP = 64_000_000  # bytes of a report loopd reads; a bigger one is unreadable
JUNIT = "junit.xml"
JEST_JSON = "report.json"
GO_JSON = "go-test.json"
WITNESS_GLOB = "witness-*.json"

_OPERATORS = set(";&|<>()`$\n")


@dataclass
class Ask:
    """A check command as loopd runs it: with what it adds, and where the report goes."""

    runner: str
    command: str  # what runs
    env: dict[str, str] = field(default_factory=dict)  # added to the checks' environment
    folder: Path | None = None  # the report folder (None: nothing asked)
    report: Path | None = None  # the report file asked for (None: the printed summary)
    witness: str = ""  # the name of loopd's pytest plugin for this check


def simple_words(command: str) -> list[str] | None:
    """The words of `command` when it is one simple command (no pipe, list, redirection,
    substitution or subshell), else None: only then can loopd add arguments at its end."""
    if any(ch in _OPERATORS for ch in command) or command.rstrip().endswith("\\"):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    return words or None


def fresh(folder: Path) -> Path:
    """`folder`, empty, whatever was there (a link included)."""
    if folder.is_symlink() or folder.is_file():
        folder.unlink()
    elif folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, mode=0o700)
    return folder


def ask(command: str, folder: Path, env: dict[str, str]) -> Ask:
    """What to run for `command` so that its runner reports into `folder` (made empty now)."""
    runner = runner_of(command)
    if runner not in ("pytest", "jest", "vitest", "go"):
        return Ask(runner=runner, command=command)
    words = simple_words(command)
    if runner == "go":
        return _ask_go(command, words, folder)
    fresh(folder)
    appendable = words is not None and "--" not in words
    if runner == "pytest":
        report = folder / JUNIT
        witness = f"loopd_witness_{secrets.token_hex(6)}"
        (folder / f"{witness}.py").write_text(_WITNESS, encoding="utf-8")
        option = f"--junitxml={report}"
        addopts = f"{env.get('PYTEST_ADDOPTS', '')} -p {witness} {shlex.quote(option)}"
        path = env.get("PYTHONPATH", "")
        added = {
            "PYTEST_ADDOPTS": addopts.strip(),
            "PYTHONPATH": f"{folder}{os.pathsep}{path}" if path else str(folder),
        }
        run = f"{command} {shlex.quote(option)}" if appendable else command
        return Ask(runner, run, added, folder, report, witness)
    if not appendable:
        return Ask(runner=runner, command=command, folder=folder)
    report = folder / JEST_JSON
    if runner == "jest":
        extra = ["--json", f"--outputFile={report}"]
    else:
        extra = ["--reporter=default", "--reporter=json", f"--outputFile.json={report}"]
    run = " ".join([command, *(shlex.quote(e) for e in extra)])
    return Ask(runner=runner, command=run, folder=folder, report=report)


def _ask_go(command: str, words: list[str] | None, folder: Path) -> Ask:
    """`go test` asked for `-json` into the report folder, when the command is simple."""
    names = [w.rsplit("/", 1)[-1] for w in words or []]
    at = next((i for i in range(1, len(names)) if names[i - 1 : i + 1] == ["go", "test"]), None)
    if words is None or at is None:
        return Ask(runner="go", command=command)
    fresh(folder)
    report = folder / GO_JSON
    head = [_word(w) for w in words[: at + 1]]
    run = " ".join([*head, "-json", *(shlex.quote(w) for w in words[at + 1 :])])
    return Ask(
        runner="go", command=f"{run} > {shlex.quote(str(report))}", folder=folder, report=report
    )


_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _word(word: str) -> str:
    """`word` quoted for the shell; an assignment (`GOFLAGS=-v`) stays one."""
    name = _ASSIGNMENT.match(word)
    if name:
        return name.group(0) + shlex.quote(word[name.end() :])
    return shlex.quote(word)


def shown(asked: Ask, output: str) -> str:
    """The check's output as a person reads it: for go test asked for `-json`, what went to
    standard error, then the text of the report's events (what `go test -v` prints)."""
    if asked.runner != "go" or asked.report is None or not asked.report.is_file():
        return output
    try:
        if asked.report.stat().st_size > REPORT_CAP:
            return output + f"\n[loopd: {asked.report.name} is over {REPORT_CAP} bytes]\n"
        text = asked.report.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return output + f"\n[loopd: {asked.report.name} cannot be read ({exc})]\n"
    printed = []
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            printed.append(line + "\n")  # shown as it is; the count fails closed on it
            continue
        if isinstance(event, dict) and isinstance(event.get("Output"), str):
            printed.append(event["Output"])
    text = "".join(printed)
    if len(text) > OUTPUT_CAP:  # as run_check keeps a long output: its end
        text = (
            f"[loopd: the first {len(text) - OUTPUT_CAP} characters left out]\n"
            + text[-OUTPUT_CAP:]
        )
    return output + text


def read(asked: Ask, output: str) -> TestCounts | None:
    """What the check's runner executed: from its report where loopd asked for one, else
    from its printed summary; None when no runner was recognised."""
    if not asked.runner:
        return None
    if asked.report is None:
        counted = count(asked.command, output)
        if counted is not None or asked.runner == "go":
            return counted
        return TestCounts(runner=asked.runner, unreadable="no summary of the runner's found")
    if asked.runner == "pytest" and asked.folder is not None:
        # One per pytest process that loopd's witness saw start at the top (`a && b`).
        reports = sorted(asked.folder.glob("junit*.xml"))
    else:
        reports = [asked.report] if asked.report.exists() else []
    if not reports:
        return _unreadable(asked, f"{asked.report.name} was not written")
    outcomes: dict[str, str] = {}
    for report in reports:
        try:
            if report.stat().st_size > REPORT_CAP:
                return _unreadable(asked, f"{report.name} is over {REPORT_CAP} bytes")
            text = report.read_text(encoding="utf-8", errors="replace")
            found = _READERS[asked.runner](text)
        except (OSError, ValueError, ET.ParseError, TypeError, KeyError, AttributeError) as exc:
            return _unreadable(asked, f"{report.name} cannot be read ({exc})")
        for test, outcome in found.items():
            if _RANK[outcome] > _RANK.get(outcomes.get(test, ""), -1):
                outcomes[test] = outcome
    counted = by_outcome(asked.runner, outcomes)
    if asked.runner == "pytest":
        deselected = _DESELECTED.findall(output)  # not in the report; 0 when not printed
        counted.deselected = int(deselected[-1]) if deselected else 0
    if asked.witness and asked.folder is not None:
        problem = _witnessed(counted, outcomes, asked.folder)
        if problem:
            return _unreadable(asked, problem)
    return counted


def by_outcome(runner: str, outcomes: dict[str, str]) -> TestCounts:
    """The counts of a report's test cases, each by its outcome."""
    executed = sorted(t for t, o in outcomes.items() if o != "skipped")
    not_run = sorted(t for t, o in outcomes.items() if o == "skipped")
    failed = sum(1 for o in outcomes.values() if o == "failed")
    return TestCounts(
        runner=runner,
        ran=len(executed),
        passed=len(executed) - failed,
        failed=failed,
        skipped=len(not_run),
        executed=executed,
        not_run=not_run,
    )


def _unreadable(asked: Ask, why: str) -> TestCounts:
    return TestCounts(runner=asked.runner, unreadable=why)


# -- pytest ----------------------------------------------------------------------------------

_DESELECTED = re.compile(r"(\d+) deselected")
_RANK = {"skipped": 0, "passed": 1, "failed": 2}  # a test run twice keeps its worst outcome


def junit_outcomes(text: str) -> dict[str, str]:
    """Each test case of a JUnit XML report by id (`classname::name`): passed, failed (a
    failure or an error) or skipped (skipped, xfailed)."""
    root = ET.fromstring(text)
    outcomes: dict[str, str] = {}
    for case in root.iter("testcase"):
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        tags = {child.tag for child in case}
        if tags & {"failure", "error"}:
            outcome = "failed"
        elif "skipped" in tags:
            outcome = "skipped"
        else:
            outcome = "passed"
        if outcomes.get(test) != "failed":  # a failed teardown keeps the case failed
            outcomes[test] = outcome
    return outcomes


def _witnessed(counted: TestCounts, outcomes: dict[str, str], folder: Path) -> str:
    """Fill `counted.tampered` from loopd's witness; why the count is unreadable, or ""."""
    seen: dict[str, bool] = {}
    files = sorted(folder.glob(WITNESS_GLOB))
    if not files:
        return "loopd's witness plugin did not report (was it disabled?)"
    for path in files:  # one per process: pytest-xdist's workers each write theirs
        try:
            calls = json.loads(path.read_text(encoding="utf-8"))["calls"]
        except (OSError, ValueError, KeyError, TypeError):
            return f"loopd's witness report {path.name} cannot be read"
        if not isinstance(calls, dict):
            return f"loopd's witness report {path.name} cannot be read"
        for test, raised in calls.items():
            # A test run again (a rerun plugin) counts as raised only if every call raised.
            seen[str(test)] = seen.get(str(test), True) and bool(raised)
    tampered = []
    for test, raised in sorted(seen.items()):
        if test not in outcomes:
            tampered.append(f"{test} (ran, but is missing from the report)")
        elif raised and outcomes[test] == "passed":
            tampered.append(f"{test} (raised, but the report says passed)")
    counted.tampered = tampered
    return ""


# loopd's pytest plugin for one check: an outermost hook wrapper sees each test's call as
# pytest made it, before a plugin of the tree could change the report made from it.
_WITNESS = '''"""loopd's witness for one check (runparts/testreports.py): which tests raised."""

import json
import os

import pytest

_FOLDER = os.path.dirname(os.path.abspath(__file__))
_NESTED = "LOOPD_PYTEST_WITNESS"  # set in a pytest process loopd's check started
_calls = {}
_state = {"on": False, "prefix": None}


def _test_id(nodeid):
    try:
        from _pytest.junitxml import mangle_test_address

        names = mangle_test_address(nodeid)
    except Exception:
        names = [nodeid]
    classnames = names[:-1]
    if _state["prefix"]:
        classnames.insert(0, _state["prefix"])
    return ".".join(classnames) + "::" + names[-1]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    ours = os.path.join(_FOLDER, "junit.xml")
    mine = getattr(config.option, "xmlpath", None) == ours
    if os.environ.get(_NESTED) and not hasattr(config, "workerinput"):
        # A pytest that a test started (it inherited PYTEST_ADDOPTS): not the check's own.
        if mine:
            config.option.xmlpath = None
        return
    os.environ[_NESTED] = str(os.getpid())
    _state["on"] = True
    _state["prefix"] = getattr(config.option, "junitprefix", None)
    if mine:  # one report per pytest the check runs, so that `pytest a && pytest b` counts
        config.option.xmlpath = os.path.join(_FOLDER, "junit-%d.xml" % os.getpid())


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    if _state["on"] and call.when == "call":
        raised = call.excinfo is not None and not call.excinfo.errisinstance(
            pytest.skip.Exception
        )
        _calls[_test_id(item.nodeid)] = raised
    yield


def pytest_unconfigure(config):
    if not _state["on"]:
        return
    path = os.path.join(_FOLDER, "witness-%d.json" % os.getpid())
    with open(path, "w", encoding="utf-8") as out:
        json.dump({"calls": _calls}, out)
'''


# -- jest and vitest -------------------------------------------------------------------------

_JEST_RAN = {"passed": "passed", "failed": "failed"}
_JEST_NOT_RUN = {"pending", "skipped", "todo", "disabled"}


def jest_outcomes(text: str) -> dict[str, str]:
    """Each test case of jest's `--json` report (vitest's json reporter writes the same
    shape) by id (`file::full name`): passed, failed or skipped (pending, todo, skipped)."""
    data = json.loads(text)
    outcomes: dict[str, str] = {}
    for suite in data["testResults"]:
        name = str(suite.get("name", ""))
        for case in suite.get("assertionResults") or []:
            test = f"{name}::{case.get('fullName') or case.get('title', '')}"
            status = str(case.get("status", ""))
            if status in _JEST_RAN:
                outcomes[test] = _JEST_RAN[status]
            elif status in _JEST_NOT_RUN:
                outcomes[test] = "skipped"
            else:
                outcomes[test] = "failed"  # an outcome loopd does not know is no pass
        if suite.get("status") == "failed" and not suite.get("assertionResults"):
            outcomes[f"{name}::"] = "failed"  # the file failed to load
    return outcomes


# -- go test ---------------------------------------------------------------------------------

_GO_ENDS = {"pass": "passed", "fail": "failed", "skip": "skipped"}


def go_outcomes(text: str) -> dict[str, str]:
    """Each test (and subtest) of `go test -json`'s events by id (`package::name`): passed,
    failed or skipped, by its last `pass`/`fail`/`skip` event. A package that failed without
    a test failing (a build error, a TestMain that exits 1) counts as one failed; a package
    with no test files, or where `-run` matched nothing, adds none. A line that is no event,
    or no event at all, cannot be read."""
    outcomes: dict[str, str] = {}
    failed_packages: set[str] = set()
    events = 0
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if not isinstance(event, dict) or not isinstance(event.get("Action"), str):
            raise ValueError(f"line {number} is not a go test event")
        events += 1
        action, package = event["Action"], str(event.get("Package", ""))
        if action not in _GO_ENDS:
            continue
        test = event.get("Test")
        if test:
            outcomes[f"{package}::{test}"] = _GO_ENDS[action]
        elif action == "fail":
            failed_packages.add(package)
    if not events:
        raise ValueError("it holds no go test event")
    for package in failed_packages:
        if not any(t.startswith(f"{package}::") for t in outcomes):
            outcomes[f"{package}::"] = "failed"
    return outcomes


_READERS = {
    "pytest": junit_outcomes,
    "jest": jest_outcomes,
    "vitest": jest_outcomes,
    "go": go_outcomes,
}
