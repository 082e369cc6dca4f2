"""Tests are counted by what ran: a change the agent commits to where pytest reads its options
(`pytest.ini`, `pyproject.toml`, `setup.cfg`, `tox.ini`, `conftest.py`) cannot make the checks
pass on failing code. Each case made `loopd once` land failing tests on main (`land =
"merge"`) while `protect` covered only `tests/**`. Hostile `command` agents, real git, real
pytest under the real bubblewrap, loopd as a real subprocess."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import git, loopd, make_home, make_repo
from tests.machines import Machine, command_agent, loop_toml
from tests.sandboxing import require_bwrap
from tests.test_engines import machines
from tests.test_parity import on_both

__all__ = ["machines"]  # a fixture, imported for pytest

APP = {
    "app.py": "def add(a, b):\n    return a - b\n",
    "tests/test_app.py": "from app import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_add_zero():\n    assert add(0, 0) == 0\n",
    "tests/conftest.py": "import sys, pathlib\n"
    "sys.path.insert(0, str(pathlib.Path(__file__).parent.parent))\n",
    ".gitignore": "__pycache__/\n*.pyc\n",
}
COMMAND = "python3 -m pytest -q"

# What each hostile agent commits outside tests/ (the tests themselves are protected), and
# what loopd says of it. The other places pytest reads options from, and more attacks, are
# in test_testreports.py, without a daemon around them.
PLANTS = {
    "collect-only": (
        {"pytest.ini": "[pytest]\naddopts = --collect-only -q\n"},
        "no tests ran (pytest)",
    ),
    "exitfirst-after-a-planted-failure": (
        {
            "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-x"\n',
            "test_first.py": "def test_first():\n    assert False, 'stops the session here'\n",
            "conftest.py": "def pytest_sessionfinish(session):\n    session.exitstatus = 0\n",
        },
        "1 failed in pytest's report, but the command exited 0",
    ),
    "conftest-reports-success": (
        {
            "conftest.py": "import pytest\n\n\n"
            "@pytest.hookimpl(hookwrapper=True)\n"
            "def pytest_runtest_makereport(item, call):\n"
            "    outcome = yield\n"
            "    report = outcome.get_result()\n"
            "    report.outcome = 'passed'\n"
            "    report.longrepr = None\n",
        },
        "tests.test_app::test_add (raised, but the report says passed)",
    ),
}


def _home(tmp_path: Path, plant: dict[str, str]) -> tuple[Path, Path]:
    repo = make_repo(tmp_path / "repo", APP)
    agent = tmp_path / "agents" / "agent.py"
    agent.parent.mkdir()
    agent.write_text(
        "import pathlib\n"
        f"for name, text in {plant!r}.items():\n"
        "    path = pathlib.Path(name)\n"
        "    path.parent.mkdir(parents=True, exist_ok=True)\n"
        "    path.write_text(text)\n"
    )
    argv = [sys.executable, str(agent)]
    loop = (
        f'repo = "{repo}"\ntask = "Make the tests pass."\nagent = "hostile"\n'
        f"done_when = {json.dumps([COMMAND])}\n"
        'protect = ["tests/**"]\nland = "merge"\ncritic = "off"\n'
        "max_attempts = 1\nmax_nudges = 0\nskip_if_done = true\n"
    )
    config = f'[agents.hostile]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'
    return make_home(tmp_path / "home", config, {"app": loop}), repo


def _run(home: Path) -> dict:
    proc = loopd(home, "once", "app", timeout=300)
    run_id = proc.stdout.split()[0]
    record = home / "state" / "runs" / run_id / "run.toml"
    assert record.is_file(), proc.stdout + proc.stderr
    return tomllib.loads(record.read_text())


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_a_changed_runner_option_cannot_land_failing_tests(tmp_path: Path, name: str) -> None:
    require_bwrap()
    plant, said = PLANTS[name]
    home, repo = _home(tmp_path, plant)
    main_before = git(repo, "rev-parse", "main")
    run = _run(home)
    assert run["outcome"] == "escalated", run
    assert run.get("landed", False) is False
    assert git(repo, "rev-parse", "main") == main_before, "failing code landed on main"
    (attempt,) = run["attempts"]
    assert attempt["checks_passed"] is False, attempt
    # The base was counted from pytest's own report of what it executed.
    (base,) = run["base_tests"]
    assert (base["runner"], base["ran"], base["passed"], base["failed"]) == ("pytest", 2, 1, 1)
    assert base["executed"] == ["tests.test_app::test_add", "tests.test_app::test_add_zero"]
    assert run["cause"] == "checks-weakened", run
    (weak,) = [v for v in attempt["violations"] if v["kind"] == "checks_weakened"]
    assert weak["target"] == COMMAND and said in weak["detail"], weak
    escalation = (home / "state" / "escalations" / f"{run['id']}.md").read_text()
    assert said in escalation


def test_both_engines_weigh_a_check_by_what_ran_alike(
    tmp_path: Path, temporal: Any, machines: list
) -> None:
    """A plugin rewriting outcomes, on the local engine and on Temporal: the same cause,
    the same reason, the same record (tests/parity.py)."""
    plant, said = PLANTS["conftest-reports-success"]

    def setup(folder: Path, engine: str) -> Machine:
        root = folder / "machine"
        repo = make_repo(root / "src" / "app", APP)
        script = "import pathlib\n" + "".join(
            f"pathlib.Path({name!r}).write_text({text!r})\n" for name, text in plant.items()
        )
        text = command_agent("a", script) + f'\n[limits]\nworktrees = "{root / "worktrees"}"\n'
        loop = loop_toml(
            repo,
            task="Make the tests pass.",
            agent="a",
            done_when=[COMMAND],
            protect=["tests/**"],
            land="merge",
            critic="off",
            max_attempts=1,
            max_nudges=0,
            attempt_timeout="120s",
        )
        home = make_home(root / "loopd-home", text + engine, {"calc": loop})
        return Machine("machine", root, home, repo)

    def scenario(machine: Machine) -> int:
        machine.start("run")
        assert machine.loopd("trigger", "calc").returncode == 0
        return 1

    (run,) = on_both(tmp_path, temporal, machines, setup, scenario)
    assert run["outcome"] == "escalated" and run["cause"] == "checks-weakened", run
    (attempt,) = run["attempts"]
    (weak,) = [v for v in attempt["violations"] if v["kind"] == "checks_weakened"]
    assert said in weak["detail"], weak
    for machine in machines:
        assert git(machine.repo, "show", "main:app.py") == APP["app.py"].rstrip("\n")
