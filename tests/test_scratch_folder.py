"""The agent's scratch folder (its HOME and TMPDIR) is its own: the checks get their own HOME
and TMPDIR outside it, and a symbolic link in the check tree that leads out of the tree fails
the attempt with a violation that names it. Real git, real bubblewrap, `loopd once`."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.helpers import loopd, make_home, make_repo, runs

BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5\nprint('2 passed')\n",
}
# The agent keeps a fixed copy in its scratch folder and commits a link to it.
LINKER = r"""
import os, pathlib
where = pathlib.Path(os.environ[{var!r}]) / "fixed_calc.py"
where.write_text("def add(a, b):\n    return a + b\n")
os.remove("calc.py")
os.symlink(where, "calc.py")
"""


def home_for(tmp_path: Path, script: str, **loop: object) -> Path:
    repo = make_repo(tmp_path / "repo", BUGGY)
    argv = [sys.executable, "-c", script]
    config = f'[agents.a]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'
    settings = {
        "repo": str(repo),
        "task": "Make check.py pass.",
        "agent": "a",
        "done_when": ["python3 check.py"],
        "attempt_timeout": "120s",
        "stall_after": "60s",
        "max_nudges": 0,
        "max_attempts": 1,
        **loop,
    }
    body = "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())
    return make_home(tmp_path / "home", config, {"calc": body})


def only_run(home: Path) -> dict:
    (run,) = runs(home)
    return run


def test_a_link_into_the_agents_scratch_folder_fails_the_attempt_and_names_the_link(
    tmp_path: Path,
) -> None:
    for var in ("HOME", "TMPDIR"):
        case = tmp_path / var
        home = home_for(case, LINKER.format(var=var))
        proc = loopd(home, "once", "calc", timeout=300)
        run = only_run(home)
        assert run["sandbox"] == "bwrap", run.get("sandbox")
        assert run["outcome"] != "succeeded", (var, proc.stdout, proc.stderr[-2000:])
        (attempt,) = run["attempts"]
        assert attempt["checks_passed"] is False
        [violation] = [v for v in attempt["violations"] if v["kind"] == "link_out_of_tree"]
        assert violation["target"] == "calc.py", violation
        assert "fixed_calc.py" in violation["detail"]
        # The checks did not see the agent's copy through the link either.
        log = next((home / "state" / "runs").glob("*/attempt-1/checks.log")).read_text()
        assert "2 passed" not in log, log


def test_the_checks_get_a_home_and_tmpdir_of_their_own(tmp_path: Path) -> None:
    """What the agent leaves in its HOME and TMPDIR is not where the checks look."""
    script = (
        "import os, pathlib\n"
        "for var in ('HOME', 'TMPDIR'):\n"
        "    (pathlib.Path(os.environ[var]) / 'planted.txt').write_text(var)\n"
        "pathlib.Path('calc.py').write_text('def add(a, b):\\n    return a + b\\n')\n"
    )
    home = home_for(tmp_path, script)
    check = (
        'python3 -c "import os, pathlib, sys; '
        "sys.exit(any((pathlib.Path(os.environ[v]) / 'planted.txt').exists() "
        "for v in ('HOME', 'TMPDIR')))\""
    )
    config = home / "loops" / "calc.toml"
    text = config.read_text().replace(
        'done_when = ["python3 check.py"]', f"done_when = {json.dumps(['python3 check.py', check])}"
    )
    config.write_text(text)
    tomllib.loads(text)
    proc = loopd(home, "once", "calc", timeout=300)
    run = only_run(home)
    assert run["outcome"] == "succeeded", (run.get("reason"), proc.stderr[-2000:])


FIX = "pathlib.Path('calc.py').write_text('def add(a, b):\\n    return a + b\\n')\n"


def limit_events(home: Path) -> list[dict]:
    lines = (home / "state" / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["type"] == "resource_limit"]


def set_limits(home: Path, text: str) -> None:
    config = home / "loopd.toml"
    config.write_text(config.read_text().replace("[limits]\n", f"[limits]\n{text}\n", 1))


def test_max_tree_counts_entries_and_a_tree_over_it_never_reaches_the_repository(
    tmp_path: Path,
) -> None:
    """6,000 empty files under max_tree = "20MB": each counts as a 4 KiB block on disk."""
    script = (
        "import os, pathlib\n"
        + FIX
        + "os.mkdir('junk')\n"
        + "for i in range(6000):\n"
        + "    open(f'junk/{i}', 'w').close()\n"
    )
    home = home_for(tmp_path, script)
    set_limits(home, 'max_tree = "20MB"')
    proc = loopd(home, "once", "calc", timeout=300)
    run = only_run(home)
    assert run["outcome"] != "succeeded", proc.stderr[-2000:]
    assert [e["limit"] for e in limit_events(home)] == ["tree"]
    (attempt,) = run["attempts"]
    assert attempt["limit_hit"] == "tree"
    [kept_out] = [v for v in attempt["violations"] if v["kind"] == "too_large"]
    assert kept_out["target"] == "the whole tree" and "max_tree" in kept_out["detail"]
    repo = tmp_path / "repo"
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-tree", "-r", "--name-only", run["branch"]],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    assert "junk/" not in listed, "a tree over max_tree reached the user's repository"


def test_the_agents_scratch_folder_is_bounded_by_max_tmp(tmp_path: Path) -> None:
    """3 MB written into TMPDIR (on disk, not the sandbox's tmpfs) with max_tmp = "2MB", then
    the agent goes on: the session is ended while it runs, not at attempt_timeout."""
    script = (
        "import os, pathlib, time\n"
        + FIX
        + "(pathlib.Path(os.environ['TMPDIR']) / 'big').write_bytes(b'x' * (3 << 20))\n"
        + "time.sleep(600)\n"
    )
    home = home_for(tmp_path, script)
    set_limits(home, 'max_tmp = "2MB"')
    proc = loopd(home, "once", "calc", timeout=300)
    run = only_run(home)
    assert [e["limit"] for e in limit_events(home)] == ["tmp"], proc.stderr[-2000:]
    (attempt,) = run["attempts"]
    assert attempt["limit_hit"] == "tmp" and not attempt.get("timed_out")
    assert not attempt.get("stalls"), attempt.get("stalls")
