"""What loopd asks a check's runner to report, read back and weighed against the base: real
pytest in real git repositories, each hostile change committed where pytest reads its
options or plugins (pytest.ini, pyproject.toml, setup.cfg, tox.ini, conftest.py)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.runparts.checks import CheckResult
from daemon.runparts.testreports import ask, jest_outcomes, read, shown, simple_words
from daemon.runs.testweigh import weaker
from daemon.state.records import TestCounts
from tests.helpers import git, make_repo

PY = f"{sys.executable} -m pytest -q"
APP = {
    "app.py": "def add(a, b):\n    return a - b\n",
    "tests/test_app.py": "from app import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_add_zero():\n    assert add(0, 0) == 0\n\n\n"
    "def test_add_one():\n    assert add(1, 0) == 1\n",
    "tests/conftest.py": "import sys, pathlib\n"
    "sys.path.insert(0, str(pathlib.Path(__file__).parent.parent))\n",
}


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH", "LOOPD_"))
    }
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # xdist and the rest: a faster start
    env.update(extra or {})
    return env


def measure(repo: Path, command: str, env: dict[str, str] | None = None) -> CheckResult:
    """`command` as loopd runs it in `repo`: asked for a report, read back."""
    folder = repo.parent / f"reports-{secrets.token_hex(4)}"
    checks_env = _env(env)
    asked = ask(command, folder, checks_env)
    proc = subprocess.run(
        ["/bin/sh", "-c", asked.command],
        cwd=repo,
        env={**checks_env, **asked.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
    )
    result = CheckResult(command, proc.returncode, 0.0, False, shown(asked, proc.stdout))
    result.tests = read(asked, result.output)
    return result


def plant(repo: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "planted")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", APP)


def test_the_base_is_counted_by_test_id_from_the_junit_report(repo: Path) -> None:
    base = measure(repo, PY)
    assert base.exit_code == 1
    tests = base.tests
    assert tests is not None and not tests.unreadable and not tests.tampered
    assert (tests.ran, tests.passed, tests.failed, tests.skipped) == (3, 2, 1, 0)
    assert tests.executed == [
        "tests.test_app::test_add",
        "tests.test_app::test_add_one",
        "tests.test_app::test_add_zero",
    ]


HOSTILE = {
    "collect-only in pytest.ini, quietly": (
        {"pytest.ini": "[pytest]\naddopts = --collect-only -qq\n"},
        "no tests ran",
    ),
    "-k in pyproject.toml": (
        {"pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-k zero"\n'},
        "the base ran did not run: tests.test_app::test_add,",
    ),
    "--deselect in setup.cfg": (
        {"setup.cfg": "[tool:pytest]\naddopts = --deselect tests/test_app.py::test_add\n"},
        "no tests ran",
    ),
    "a marker nothing has, in tox.ini": (
        {"tox.ini": "[pytest]\naddopts = -m slow -p no:warnings\n"},
        "no tests ran",
    ),
    "-x after a deliberate early failure, exit status forced to 0": (
        {
            "pytest.ini": "[pytest]\naddopts = -x\n",
            "test_first.py": "def test_first():\n    assert False\n",
            "conftest.py": "def pytest_sessionfinish(session):\n    session.exitstatus = 0\n",
        },
        "1 failed in pytest's report, but the command exited 0",
    ),
    "markers that skip everything": (
        {
            "conftest.py": "import pytest\n\n\n"
            "def pytest_collection_modifyitems(items):\n"
            "    for item in items:\n"
            "        item.add_marker(pytest.mark.skip(reason='later'))\n",
        },
        "no tests ran",
    ),
    "a plugin that rewrites outcomes to passed": (
        {
            "conftest.py": "import pytest\n\n\n"
            "@pytest.hookimpl(hookwrapper=True)\n"
            "def pytest_runtest_makereport(item, call):\n"
            "    report = (yield).get_result()\n"
            "    report.outcome, report.longrepr = 'passed', None\n",
        },
        "tests.test_app::test_add (raised, but the report says passed)",
    ),
    "a plugin that logs failures as passes": (
        {
            "conftest.py": "def pytest_runtest_logreport(report):\n"
            "    if report.failed:\n"
            "        report.outcome = 'passed'\n"
            "\n\n"
            "def pytest_sessionfinish(session):\n"
            "    session.exitstatus = 0\n",
        },
        "1 failed in pytest's report, but the command exited 0",  # JUnit saw it first
    ),
    "a plugin that writes its own report over loopd's": (
        {
            "conftest.py": "import pathlib\n\n\n"
            "def pytest_unconfigure(config):\n"
            "    path = pathlib.Path(config.option.xmlpath)\n"
            "    path.write_text('<testsuites><testsuite>' + ''.join(\n"
            '        f\'<testcase classname="tests.test_app" name="{n}"/>\'\n'
            "        for n in ('test_add', 'test_add_zero', 'test_add_one')) + '</testsuite>"
            "</testsuites>')\n"
            "\n\n"
            "def pytest_sessionfinish(session):\n"
            "    session.exitstatus = 0\n",
        },
        "tests.test_app::test_add (raised, but the report says passed)",
    ),
    "a conftest that ends the process with status 0 before any report": (
        {"conftest.py": "import os\n\nos._exit(0)\n"},
        "loopd could not count what pytest ran: junit.xml was not written",
    ),
    "the report moved elsewhere by addopts": (
        {"pytest.ini": "[pytest]\naddopts = --junitxml=/tmp/elsewhere.xml -x\n"},
        "",  # loopd's option comes later and wins: counted as usual (1 failed: exit 1)
    ),
    "the JUnit plugin disabled": (
        {
            "pytest.ini": "[pytest]\naddopts = -p no:junitxml\n",
            "conftest.py": "def pytest_sessionfinish(session):\n    session.exitstatus = 0\n",
        },
        "loopd could not count what pytest ran: junit.xml was not written",  # fails closed
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_runner_option_is_weighed_as_weaker(repo: Path, name: str) -> None:
    files, expected = HOSTILE[name]
    base = measure(repo, PY)
    plant(repo, files)
    now = measure(repo, PY)
    why, _ = weaker(base.tests, now)
    if expected:
        assert expected in why, (why, now.output[-2000:])
        assert now.exit_code == 0 or "no tests ran" in why or "did not run" in why
    else:
        assert now.exit_code != 0, now.output[-2000:]  # the check fails on its own


def test_a_count_that_cannot_be_read_fails_closed(repo: Path) -> None:
    """A conftest that removes loopd's report (and the witness's) before pytest ends."""
    plant(
        repo,
        {
            "app.py": "def add(a, b):\n    return a + b\n",
            "conftest.py": "import pathlib, os\n\n\n"
            "def pytest_unconfigure(config):\n"
            "    folder = pathlib.Path(config.option.xmlpath).parent\n"
            "    for path in folder.iterdir():\n"
            "        if path.suffix in ('.xml', '.json'):\n"
            "            path.unlink()\n"
            "\n\n"
            "def pytest_configure(config):\n"
            "    config.option.xmlpath = config.option.xmlpath + '.gone'\n",
        },
    )
    now = measure(repo, PY)
    assert now.exit_code == 0
    assert now.tests is not None and now.tests.unreadable
    why, allowable = weaker(TestCounts(runner="pytest", ran=3, passed=3), now)
    assert why.startswith("loopd could not count what pytest ran: junit.xml was not written")


def test_a_real_fix_is_not_weaker_and_a_compound_command_is_counted_too(repo: Path) -> None:
    base = measure(repo, f"cd tests && {PY} 2>&1 | cat")
    plant(repo, {"app.py": "def add(a, b):\n    return a + b\n"})
    now = measure(repo, f"cd tests && {PY} 2>&1 | cat")
    assert now.tests is not None and now.tests.passed == 3 and now.tests.executed
    assert weaker(base.tests, now) == ("", True)


def test_the_loops_own_pytest_addopts_is_kept_and_loopds_comes_after(repo: Path) -> None:
    base = measure(repo, PY, {"PYTEST_ADDOPTS": "-k zero"})
    assert base.tests is not None and base.tests.executed == ["tests.test_app::test_add_zero"]


def test_a_test_run_again_by_a_rerun_loop_counts_by_its_last_call(repo: Path) -> None:
    """A flaky test that fails then passes on a rerun (as pytest-rerunfailures does) is no
    tampering: the witness keeps the call that the report's outcome comes from."""
    plant(
        repo,
        {
            "app.py": "def add(a, b):\n    return a + b\n",
            "conftest.py": "import pytest\n\n\n"
            "@pytest.hookimpl(tryfirst=True)\n"
            "def pytest_runtest_protocol(item, nextitem):\n"
            "    from _pytest.runner import runtestprotocol\n"
            "    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)\n"
            "    runtestprotocol(item, nextitem=nextitem, log=False)\n"
            "    reports = runtestprotocol(item, nextitem=nextitem, log=True)\n"
            "    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)\n"
            "    return True\n",
            "tests/test_flaky.py": "import pathlib\n\n\n"
            "def test_flaky(tmp_path_factory):\n"
            "    mark = pathlib.Path(__file__).with_suffix('.ran')\n"
            "    if not mark.exists():\n"
            "        mark.write_text('1')\n"
            "        assert False\n",
        },
    )
    now = measure(repo, PY)
    assert now.tests is not None and not now.tests.tampered, now.tests
    assert now.exit_code == 0 and now.tests.passed == 4


def test_only_a_simple_command_gets_arguments_at_its_end(tmp_path: Path) -> None:
    assert simple_words("python -m pytest -q tests") == ["python", "-m", "pytest", "-q", "tests"]
    for compound in ("pytest | tail", "cd x && pytest", "pytest > log", "pytest $(ls)", "a; b"):
        assert simple_words(compound) is None
    asked = ask("python -m pytest -q", tmp_path / "r", {})
    assert asked.command.startswith("python -m pytest -q --junitxml=")
    assert asked.env["PYTEST_ADDOPTS"].startswith(f"-p {asked.witness} ")
    assert (tmp_path / "r" / f"{asked.witness}.py").is_file()
    asked = ask("pytest -q -- tests", tmp_path / "r", {})
    assert asked.command == "pytest -q -- tests"  # after `--` it would be a path
    asked = ask("npx jest --ci", tmp_path / "j", {})
    assert asked.command.startswith("npx jest --ci --json --outputFile=")
    asked = ask("npx vitest run", tmp_path / "v", {})
    assert "--reporter=json" in asked.command and "--outputFile.json=" in asked.command
    asked = ask("cargo test", tmp_path / "c", {})
    assert asked.command == "cargo test" and asked.report is None


JEST_REPORT = {
    "numTotalTests": 99,  # what a report states of itself is not believed
    "numPassedTests": 99,
    "testResults": [
        {
            "name": "/repo/sum.test.js",
            "status": "failed",
            "assertionResults": [
                {"fullName": "sum adds", "status": "passed"},
                {"fullName": "sum subtracts", "status": "failed"},
                {"fullName": "sum later", "status": "pending"},
                {"fullName": "sum someday", "status": "todo"},
            ],
        },
        {"name": "/repo/broken.test.js", "status": "failed", "assertionResults": []},
    ],
}


def test_jests_json_report_is_counted_by_outcome(tmp_path: Path) -> None:
    outcomes = jest_outcomes(json.dumps(JEST_REPORT))
    assert outcomes == {
        "/repo/sum.test.js::sum adds": "passed",
        "/repo/sum.test.js::sum subtracts": "failed",
        "/repo/sum.test.js::sum later": "skipped",
        "/repo/sum.test.js::sum someday": "skipped",
        "/repo/broken.test.js::": "failed",
    }
    asked = ask("npx jest", tmp_path / "j", {})
    assert asked.report is not None
    asked.report.write_text(json.dumps(JEST_REPORT))
    counted = read(asked, "")
    assert counted is not None
    assert (counted.ran, counted.passed, counted.failed, counted.skipped) == (3, 1, 2, 2)
    asked.report.write_text("{not json")
    counted = read(asked, "Tests: 3 passed, 3 total")
    assert counted is not None and "cannot be read" in counted.unreadable


def test_two_pytests_in_one_command_and_a_pytest_a_test_starts_are_counted_right(
    repo: Path,
) -> None:
    """`pytest a && pytest b` counts both; a pytest that a test starts in a subprocess (it
    inherits PYTEST_ADDOPTS) is not the check's, and its failing tests are not counted."""
    plant(
        repo,
        {
            "app.py": "def add(a, b):\n    return a + b\n",
            "more/test_more.py": "import subprocess, sys, pathlib\n\n\n"
            "def test_inner_pytest_fails_on_purpose(tmp_path):\n"
            "    (tmp_path / 'test_inner.py').write_text('def test_no():\\n    assert False\\n')\n"
            "    proc = subprocess.run([sys.executable, '-m', 'pytest', '-q', str(tmp_path)])\n"
            "    assert proc.returncode == 1\n",
        },
    )
    now = measure(repo, f"{PY} tests && {PY} more")
    assert now.exit_code == 0, now.output[-3000:]
    tests = now.tests
    assert tests is not None and not tests.unreadable and not tests.tampered, tests
    assert (tests.ran, tests.passed, tests.failed) == (4, 4, 0)
    assert "more.test_more::test_inner_pytest_fails_on_purpose" in tests.executed


def test_pytest_xdist_workers_each_report_to_the_witness(repo: Path) -> None:
    """Under pytest-xdist the controller writes the JUnit XML and each worker its witness."""
    base = measure(repo, f"{PY} -p xdist -n 2")
    tests = base.tests
    assert tests is not None and not tests.unreadable and not tests.tampered, tests
    assert (tests.ran, tests.passed, tests.failed) == (3, 2, 1)
    plant(
        repo,
        {
            "conftest.py": "import pytest\n\n\n"
            "@pytest.hookimpl(hookwrapper=True)\n"
            "def pytest_runtest_makereport(item, call):\n"
            "    report = (yield).get_result()\n"
            "    report.outcome, report.longrepr = 'passed', None\n",
        },
    )
    now = measure(repo, f"{PY} -p xdist -n 2")
    assert now.exit_code == 0
    why, allowable = weaker(base.tests, now)
    assert "tests.test_app::test_add (raised, but the report says passed)" in why
    assert allowable is False
