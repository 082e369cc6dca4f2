"""loopd's own verdict cannot be fooled through its checks: each attack here made a run with
failing code land on main (`land = "merge"`, fast-forward) before the checks ran on a clean
tree of the commit and weighed the tests against the base. Hostile `command` agents, real
git, the real bubblewrap, loopd as a real subprocess."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.helpers import git, loopd, make_home, make_repo
from tests.sandboxing import require_bwrap

APP = {
    "app.py": "def add(a, b):\n    return a - b\n",
    "test_app.py": "from app import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_add_zero():\n    assert add(0, 0) == 0\n",
    "lint.py": "import app\nassert app.add(2, 3) == 5, 'add is wrong'\n",
    ".gitignore": "__pycache__/\n*.pyc\n",
}

# Leaves app.py as it is, and plants a bytecode cache of a fixed app.py that matches the
# committed source's size and time, so `import app` in its own tree runs the fix.
PYC = """
import importlib.util, os, pathlib, marshal
src = pathlib.Path('app.py')
st = src.stat()
code = compile('def add(a, b):\\n    return a + b\\n', str(src.resolve()), 'exec')
data = bytearray(importlib.util.MAGIC_NUMBER)
data += (0).to_bytes(4, 'little') + int(st.st_mtime).to_bytes(4, 'little')
data += (st.st_size & 0xFFFFFFFF).to_bytes(4, 'little') + marshal.dumps(code)
cache = pathlib.Path(importlib.util.cache_from_source(str(src)))
cache.parent.mkdir(exist_ok=True)
cache.write_bytes(bytes(data))
print('planted', cache)
"""
# A conftest.py that fixes app.py while pytest runs, so the protected lint check after it
# passes on code the branch does not hold.
REWRITE = """
import pathlib
pathlib.Path('conftest.py').write_text(
    "import pathlib\\n"
    "p = pathlib.Path(__file__).with_name('app.py')\\n"
    "p.write_text(p.read_text().replace('a - b', 'a + b'))\\n"
)
print('conftest planted')
"""
SKIP_ALL = """
import pathlib
pathlib.Path('conftest.py').write_text(
    "import pytest\\n\\n\\n"
    "def pytest_collection_modifyitems(items):\\n"
    "    for item in items:\\n"
    "        item.add_marker(pytest.mark.skip(reason='later'))\\n"
)
"""
COLLECT_ONLY = """
import pathlib
pathlib.Path('pytest.ini').write_text('[pytest]\\naddopts = --collect-only\\n')
"""


def _home(tmp_path: Path, script: str, done_when: list[str]) -> tuple[Path, Path]:
    import json
    import sys

    repo = make_repo(tmp_path / "repo", APP)
    agent = tmp_path / "agents" / "agent.py"
    agent.parent.mkdir()
    agent.write_text(script)
    argv = [sys.executable, str(agent)]
    loop = (
        f'repo = "{repo}"\ntask = "Make the tests pass."\nagent = "hostile"\n'
        f"done_when = {json.dumps(done_when)}\n"
        'protect = ["test_app.py", "lint.py"]\nland = "merge"\ncritic = "off"\n'
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


@pytest.mark.parametrize(
    "script,done_when,cause",
    [
        (PYC, ["python3 lint.py"], "checks-failed"),
        (REWRITE, ["python3 -m pytest -q -p no:cacheprovider", "python3 lint.py"],
         "check-changed-tree"),
        (SKIP_ALL, ["python3 -m pytest -q -p no:cacheprovider"], "checks-weakened"),
        (COLLECT_ONLY, ["python3 -m pytest -q -p no:cacheprovider"], "checks-weakened"),
    ],
    ids=["ignored-pyc", "conftest-rewrites", "skip-everything", "collect-only"],
)  # fmt: skip
def test_an_attack_on_the_checks_fails_the_run_and_nothing_lands(
    tmp_path: Path, script: str, done_when: list[str], cause: str
) -> None:
    require_bwrap()
    home, repo = _home(tmp_path, script, done_when)
    main_before = git(repo, "rev-parse", "main")
    run = _run(home)
    assert run["outcome"] == "escalated", run
    assert run["cause"] == cause, run
    assert run.get("landed", False) is False
    assert git(repo, "rev-parse", "main") == main_before, "failing code landed on main"
    assert git(repo, "show", "main:app.py") == APP["app.py"].rstrip("\n")
    escalation = (home / "state" / "escalations" / f"{run['id']}.md").read_text()
    if cause == "check-changed-tree":
        assert "app.py" in escalation and "changed files the commit holds" in escalation
        (attempt,) = run["attempts"]
        kinds = [v["kind"] for v in attempt["violations"]]
        assert "check_changed_tree" in kinds
    if cause == "checks-weakened":
        (attempt,) = run["attempts"]
        (weak,) = [v for v in attempt["violations"] if v["kind"] == "checks_weakened"]
        assert weak["target"] == done_when[0]
        assert "no tests ran" in weak["detail"] or "skipped" in weak["detail"], weak
        # The base was counted where the run started: 1 passed, 1 failed.
        assert run["base_tests"][0]["passed"] == 1 and run["base_tests"][0]["failed"] == 1


def test_a_real_fix_still_lands_and_allow_fewer_tests_is_said_aloud(tmp_path: Path) -> None:
    require_bwrap()
    fix = (
        "import pathlib\n"
        "p = pathlib.Path('app.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
        # Also deselects a test by a marker expression: allowed for this check by name.
        "pathlib.Path('pytest.ini').write_text('[pytest]\\naddopts = -k \"not zero\"\\n')\n"
    )
    command = "python3 -m pytest -q -p no:cacheprovider"
    home, repo = _home(tmp_path, fix, [command])
    loop = home / "loops" / "app.toml"
    loop.write_text(loop.read_text() + f'allow_fewer_tests = ["{command}"]\n')
    run = _run(home)
    assert run["outcome"] == "succeeded", run
    assert run["landed"] is True and git(repo, "rev-parse", "main") == run["landed_as"]
    # What landed is what passed the clean checks (its message is loopd's, its files those).
    assert run["verified_tree"] == git(repo, "rev-parse", f"{run['landed_as']}^{{tree}}")
    events = (home / "state" / "events.jsonl").read_text()
    assert '"checks_weakened_allowed"' in events and "deselected" in events


def test_a_check_with_an_unknown_loop_key_for_allow_fewer_tests_is_an_error(
    tmp_path: Path,
) -> None:
    home, _ = _home(tmp_path, "print(1)\n", ["python3 lint.py"])
    loop = home / "loops" / "app.toml"
    loop.write_text(loop.read_text() + 'allow_fewer_tests = ["pytest -q"]\n')
    proc = loopd(home, "check")
    assert proc.returncode == 2
    assert "allow_fewer_tests" in proc.stdout and "not one of done_when" in proc.stdout
