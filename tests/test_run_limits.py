"""Every run is bounded: an agent that forks without end, fills /tmp or eats memory is stopped
at the run's limits (`[limits] max_processes`, `max_tmp`, `max_memory`), nothing outside the
run is harmed, and the run says so (cause `resource-limit`). Hostile `command` agents under
the real bubblewrap; each attack is bounded by itself too, so a broken limit cannot take the
machine down (the test then fails on the count)."""

from __future__ import annotations

import json
from pathlib import Path

from daemon.sandbox.limits import backend
from tests.helpers import loopd
from tests.sandboxing import once_record, require_bwrap, script_home

FILES = {"calc.py": "def add(a, b):\n    return a - b\n", "check.py": "import calc\n"
         "assert calc.add(2, 3) == 5\n"}  # fmt: skip

# Starts up to 300 sleeping children and reports how many it got.
FORKS = """
import os, subprocess, time
kids = []
for _ in range(300):
    try:
        kids.append(subprocess.Popen(['sleep', '30']))
    except OSError as exc:
        print('fork refused:', exc)
        break
print('children', len(kids), flush=True)
open('forks.txt', 'w').write(str(len(kids)))
for kid in kids:
    kid.kill()
"""
# Writes up to 64 MB into /tmp and reports how much stayed.
TMP = """
import os
written = 0
try:
    with open('/tmp/fill', 'wb') as fh:
        for _ in range(64):
            fh.write(b'x' * (1 << 20)); fh.flush(); written += 1
except OSError as exc:
    print('tmp refused:', exc)
open('tmp.txt', 'w').write(str(written))
"""
MEMORY = """
try:
    hog = bytearray(512 * 1024 * 1024)
    open('memory.txt', 'w').write('got it')
except MemoryError:
    open('memory.txt', 'w').write('refused')
    print('memory refused')
"""


def _home(tmp_path: Path, script: str, limits: str) -> tuple[Path, Path]:
    return script_home(tmp_path, script, FILES, limits)


def _run(home: Path) -> dict:
    return once_record(home)


def _left(repo: Path, run: dict, name: str) -> str:
    from tests.helpers import git

    return git(repo, "show", f"{run['branch']}:{name}")


def test_an_agent_that_forks_without_end_is_held_at_max_processes(tmp_path: Path) -> None:
    require_bwrap()
    home, repo = _home(tmp_path, FORKS, "max_processes = 64\n")
    run = _run(home)
    forks = int(_left(repo, run, "forks.txt"))
    assert forks < 64, f"{forks} children: the process limit did not hold"
    if backend().kind != "rlimit":
        assert run["cause"] == "resource-limit", run
        assert run["attempts"][0]["limit_hit"] == "processes"
        assert "processes limit" in run["reason"] and "max_processes" in run["reason"]
        escalation = (home / "state" / "escalations" / f"{run['id']}.md").read_text()
        assert "max_processes" in escalation


def test_an_agent_that_fills_tmp_is_held_at_max_tmp(tmp_path: Path) -> None:
    require_bwrap()
    home, repo = _home(tmp_path, TMP, 'max_tmp = "8MB"\n')
    run = _run(home)
    assert int(_left(repo, run, "tmp.txt")) <= 8
    assert run["outcome"] == "escalated"  # its checks still fail; nothing else was harmed


def test_an_agent_that_eats_memory_is_held_at_max_memory(tmp_path: Path) -> None:
    require_bwrap()
    home, repo = _home(tmp_path, MEMORY, 'max_memory = "256MB"\n')
    run = _run(home)
    assert _left(repo, run, "memory.txt") == "refused"


def test_an_agent_that_fills_its_tree_is_held_at_max_tree(tmp_path: Path) -> None:
    require_bwrap()
    script = (
        "import os\nfor i in range(4):\n    open(f'blob{i}', 'wb').write(os.urandom(1 << 20))\n"
    )
    home, _ = _home(tmp_path, script, 'max_tree = "2MB"\n')
    run = _run(home)
    assert run["attempts"][0]["limit_hit"] == "tree"
    assert run["cause"] == "resource-limit" and "max_tree" in run["reason"], run


def test_check_and_status_say_which_limits_are_in_force(tmp_path: Path) -> None:
    home, _ = _home(tmp_path, "print(1)\n", "max_processes = 64\n")
    checked = json.loads(loopd(home, "check", "--json").stdout)
    assert checked["limits"].startswith("limits: ")
    assert "64 processes" in checked["limits"] or "not bounded" in checked["limits"]
    status = json.loads(loopd(home, "status", "--json").stdout)
    assert status["daemon"]["limits"] == checked["limits"]


def test_mode_off_as_root_is_refused_unless_the_person_says_so(tmp_path: Path) -> None:
    import os

    import pytest

    if os.geteuid() != 0:
        pytest.skip("the refusal is for root (tests/test_sandbox.py covers the choice as both)")
    home, _ = _home(tmp_path, "print(1)\n", '[sandbox]\nmode = "off"\n')
    run = _run(home)
    assert run["outcome"] == "error" and run["cause"] == "sandbox-unavailable"
    assert "unconfined_as_root = true" in run["reason"]
