"""`setup` and `skip_if_done` with real parts: a venv made in the run's tree, an editable
install of a src-layout package, pytest; a daemon whose git hooks see a push to a green main.

pip installs from a folder of wheels, never from the network: `.ci/run` fills
~/.cache/loopd/test-wheels (setuptools, wheel, pytest and its dependencies) from PyPI once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w

from tests.helpers import (
    events,
    git,
    loopd,
    make_home,
    make_repo,
    start_daemon,
    stop_daemon,
    transcript_text,
    wait_for,
)
from tests.sandboxing import require_bwrap

WHEELS = Path(os.path.expanduser("~/.cache/loopd/test-wheels"))
NEEDED = ("setuptools", "wheel", "pytest", "pluggy", "iniconfig", "packaging")

PACKAGE = {
    "setup.py": (
        "from setuptools import setup, find_packages\n"
        'setup(name="calcpkg", version="0.1", package_dir={"": "src"},'
        ' packages=find_packages("src"))\n'
    ),
    "src/calcpkg/__init__.py": "def add(a, b):\n    return a - b\n",
    "tests/test_calc.py": (
        "import calcpkg\n\n\ndef test_add():\n    assert calcpkg.add(2, 3) == 5\n\n\n"
        "def test_imports_the_trees_package():\n"
        "    import os\n"
        "    assert os.environ['RUN_TREE'] in calcpkg.__file__, calcpkg.__file__\n"
    ),
    ".gitignore": ".venv/\n*.egg-info/\n",
}
# Fixes src/calcpkg, and, hostile, tries to replace the venv's pytest and commit the venv.
FIX_PACKAGE = (
    "import pathlib, subprocess\n"
    "p = pathlib.Path('src/calcpkg/__init__.py')\n"
    "p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
    "try:\n"
    "    pathlib.Path('.venv/bin/pytest').write_text('#!/bin/sh\\nexit 0\\n')\n"
    "    print('WROTE THE VENV')\n"
    "except OSError as exc:\n"
    "    print('venv is read-only:', exc)\n"
    "subprocess.run(['git', 'add', '-f', '.venv/pyvenv.cfg'])\n"
    "subprocess.run(['git', '-c', 'user.name=a', '-c', 'user.email=a@b',\n"
    "                'commit', '-qm', 'venv'])\n"
)


def wheels() -> Path:
    have = (
        {p.name.split("-")[0].lower() for p in WHEELS.glob("*.whl")} if WHEELS.is_dir() else set()
    )
    missing = [name for name in NEEDED if name not in have]
    if missing:
        pytest.skip(
            f"no wheels for {', '.join(missing)} in {WHEELS}: `.ci/run` downloads them "
            "(pip download --dest ~/.cache/loopd/test-wheels setuptools==65.5.0 wheel==0.43.0 "
            "pytest==9.0.3)"
        )
    return WHEELS


def agent_profile(script: str) -> str:
    argv = [sys.executable, "-c", script]
    return f'[agents.a]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'


def test_setup_makes_a_venv_in_the_tree_and_the_checks_see_the_trees_package(
    tmp_path: Path,
) -> None:
    require_bwrap()
    folder = wheels()
    repo = make_repo(tmp_path / "repo", PACKAGE)
    # The person's own checkout is installed in their own venv, on the daemon's PATH: without
    # `setup`, pytest there imports the checkout, never the run's tree.
    user_venv = tmp_path / "user-venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(user_venv)], check=True)
    pip = [str(user_venv / "bin" / "pip"), "install", "-q", "--no-index", "--find-links"]
    subprocess.run([*pip, str(folder), "-e", str(repo), "pytest"], check=True)
    setup = [
        "/usr/bin/python3 -m venv .venv",
        f".venv/bin/pip install -q --no-index --find-links {folder} -e . pytest",
    ]
    loop = {
        "repo": str(repo),
        "task": "Fix add() in src/calcpkg so that the tests pass.",
        "agent": "a",
        "setup": setup,
        "done_when": ["pytest -q -p no:cacheprovider tests"],
        "env": {"PATH": "{tree}/.venv/bin:{PATH}", "RUN_TREE": "{tree}"},
        "max_attempts": 1,
        "max_nudges": 0,
        "attempt_timeout": "120s",
        "stall_after": "60s",
        "check_timeout": "120s",
    }
    body = tomli_w.dumps(loop)
    home = make_home(tmp_path / "home", agent_profile(FIX_PACKAGE), {"pkg": body})
    env = {"PATH": f"{user_venv / 'bin'}:{os.environ['PATH']}"}
    proc = loopd(home, "once", "pkg", timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    run_dir = home / "state" / "runs" / run_id
    run = tomllib.loads((run_dir / "run.toml").read_text())
    assert run["outcome"] == "succeeded", run["reason"]
    # setup.log holds what pip said; setup's paths were read-only for the agent.
    assert "$ /usr/bin/python3 -m venv .venv" in (run_dir / "setup.log").read_text()
    made = {Path(p).name for p in run["exposure"]["read_only"]}
    assert {".venv", "calcpkg.egg-info"} <= made
    lines = transcript_text(run_dir / "attempt-1").splitlines()
    said = " ".join(e.get("text", "") for e in map(json.loads, lines) if e["stream"] == "stdout")
    assert "venv is read-only" in said and "WROTE THE VENV" not in said
    # The checks imported the tree's package (the person's checkout still has the bug).
    checks = (run_dir / "attempt-1" / "checks.log").read_text()
    assert "2 passed" in checks, checks
    assert "a - b" in (repo / "src/calcpkg/__init__.py").read_text()
    # What setup made stays out of the branch, even after the agent committed part of it.
    files = git(repo, "ls-tree", "-r", "--name-only", run["branch"]).splitlines()
    assert not [f for f in files if f.startswith(".venv") or "egg-info" in f], files
    assert "src/calcpkg/__init__.py" in files
    types = [e["type"] for e in events(home) if e.get("run") == run_id]
    assert types.index("setup_finished") < types.index("attempt_started")


def test_a_failing_setup_ends_the_run_as_error_escalated_with_the_logs_tail(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "x\n"})
    loop = (
        f'repo = "{repo}"\ntask = "t"\nagent = "a"\n'
        'setup = ["echo preparing", "echo no such package >&2; exit 3", "echo never"]\n'
        'done_when = ["false"]\n'
    )
    home = make_home(tmp_path / "home", agent_profile("print('agent ran')"), {"s": loop})
    proc = loopd(home, "once", "s")
    assert proc.returncode == 1
    run_id = proc.stdout.splitlines()[0]
    run = tomllib.loads((home / "state" / "runs" / run_id / "run.toml").read_text())
    assert run["outcome"] == "error" and run["cause"] == "setup-failed"
    assert run.get("attempts", []) == []
    log = (home / "state" / "runs" / run_id / "setup.log").read_text()
    assert "no such package" in log and "never" not in log
    escalation = (home / "state" / "escalations" / f"{run_id}.md").read_text()
    assert "no such package" in escalation and "setup" in escalation


def test_a_push_to_a_green_main_is_skipped_with_no_agent_and_no_tokens(
    tmp_path: Path, daemons: list
) -> None:
    marker = tmp_path / "talk" / "agent-ran"
    marker.parent.mkdir()
    repo = make_repo(tmp_path / "repo", {"calc.py": "def add(a, b):\n    return a + b\n"})
    (repo / "check.py").write_text("from calc import add\nassert add(2, 3) == 5\n")
    git(repo, "add", "check.py")
    git(repo, "commit", "-q", "-m", "check")
    agent = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
    loop = (
        f'repo = "{repo}"\ntask = "Keep check.py passing."\nagent = "a"\non_push = ["main"]\n'
        'done_when = ["python3 check.py"]\noverlap = "queue"\n'
    )
    config = agent_profile(agent) + f'\n[sandbox]\nwritable = ["{marker.parent}"]\n'
    home = make_home(tmp_path / "home", config, {"calc": loop})
    assert loopd(home, "hooks", "install", "calc").returncode == 0
    daemon = start_daemon(home)
    daemons.append(daemon)
    try:
        (repo / "README.md").write_text("green\n")
        git(repo, "add", "README.md")
        git(repo, "commit", "-q", "-m", "docs")
        finished = wait_for(
            lambda: [e for e in events(home) if e["type"] == "run_finished"],
            timeout=60,
            what="the push's run to finish",
        )
        assert finished[0]["outcome"] == "skipped" and finished[0]["tokens"] == 0
        run_id = finished[0]["run"]
        run = tomllib.loads((home / "state" / "runs" / run_id / "run.toml").read_text())
        assert run["trigger"]["kind"] == "push" and run.get("attempts", []) == []
        assert run["reason"].startswith("already done")
        assert not marker.exists()
        assert git(repo, "branch", "--list", "loopd/*") == ""  # its empty branch is gone
        waited = loopd(home, "trigger", "calc", "--wait", timeout=60)
        assert waited.returncode == 0 and "skipped" in waited.stdout, waited.stdout
        assert not marker.exists()
        forced = loopd(home, "trigger", "calc", "--wait", "--force", timeout=60)
        assert marker.exists(), forced.stdout + forced.stderr
    finally:
        stop_daemon(daemon)
