"""What the sandbox tests share: the bubblewrap requirement, hostile agents, snapshots."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest
import tomli_w

from tests.helpers import file_text, git, make_home, make_repo

BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5, f'add(2, 3) gave {add(2, 3)}'\n",
}
FIX = (
    "import pathlib\n"
    "c = pathlib.Path('calc.py'); c.write_text(c.read_text().replace('a - b', 'a + b'))\n"
)


def require_bwrap() -> None:
    """Skip where bubblewrap cannot run, except in CI (CI=true), where that fails the test."""
    from daemon.sandbox.bwrap import BwrapSandbox

    available = BwrapSandbox.availability()
    if available.ok:
        return
    message = f"bubblewrap cannot run here: {available.detail}"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI=true: the sandbox tests must run)")
    pytest.skip(message)


def home_snapshot(home: Path) -> dict[str, str]:
    """A hash of every file of the home that is not loopd's own output."""
    out = {}
    for path in sorted(home.rglob("*")):
        rel = path.relative_to(home).as_posix()
        if path.is_file() and not rel.startswith(("state/", "daemon.log")):
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def state_text(home: Path) -> str:
    """Every file under state/, as text."""
    files = (home / "state").rglob("*")
    return "\n".join(file_text(p) for p in files if p.is_file())


def branch_text(repo: Path, branch: str) -> str:
    """Every commit of the run's branch since the base, with its whole content."""
    return git(repo, "log", "-p", "--all", "--format=%H %s%n%b", branch)


def hostile_home(
    tmp_path: Path,
    script: str,
    *,
    config: str = "",
    loop: dict[str, object] | None = None,
    prompt_arg: bool = False,
) -> tuple[Path, Path]:
    """A repository with a failing check, and a home whose `command` agent runs `script`.

    The script lives outside the home (`tmp_path/agents/`), runs with this Python, and can
    use HOME_DIR (the loopd home) and REAL_HOME, which the test names to it.
    """
    repo = make_repo(tmp_path / "repo", BUGGY)
    agents = tmp_path / "agents"
    agents.mkdir(exist_ok=True)
    agent = agents / "agent.py"
    agent.write_text(script)
    argv = [sys.executable, str(agent)] + (["{prompt}"] if prompt_arg else [])
    keys: dict[str, object] = {
        "repo": str(repo),
        "task": "Make check.py pass.",
        "agent": "hostile",
        "done_when": ["python3 check.py"],
        "max_attempts": 1,
        "max_nudges": 0,
        "attempt_timeout": "60s",
        "stall_after": "30s",
        **(loop or {}),
    }
    agent_config = f'[agents.hostile]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'
    home = make_home(tmp_path / "home", agent_config + config, {"calc": tomli_w.dumps(keys)})
    return home, repo


def preamble(home: Path, real_home: Path | None = None) -> str:
    """The top of a hostile script: where things are, and a log kept in the run's tree."""
    return (
        "import os, pathlib, signal, socket, subprocess, sys, traceback\n"
        f"HOME_DIR = pathlib.Path({str(home)!r})\n"
        f"REAL_HOME = pathlib.Path({str(real_home or '')!r})\n"
        "LOG = open('attack.log', 'a')\n"
        "def attempt(name, fn):\n"
        "    try:\n"
        "        result = fn()\n"
        "        LOG.write(f'{name}: DONE {result!r}\\n')\n"
        "    except BaseException as exc:\n"
        "        LOG.write(f'{name}: BLOCKED {type(exc).__name__}: {exc}\\n')\n"
        "    LOG.flush()\n"
    )


def attack_log(repo: Path, branch: str) -> str:
    """What the hostile agent wrote about its attempts, from the run's branch."""
    return git(repo, "show", f"{branch}:attack.log")


def script_home(
    tmp_path: Path, script: str, files: dict[str, str], config: str = "", loop: str = ""
) -> tuple[Path, Path]:
    """A repository of `files`, and a home whose loop `calc` runs `script` as a `command`
    agent (one attempt, no critic, checks `python3 check.py` unless `loop` says otherwise);
    `config` goes under `[limits]` of loopd.toml (a table of its own may follow)."""
    repo = make_repo(tmp_path / "repo", files)
    agent = tmp_path / "agents" / "agent.py"
    agent.parent.mkdir(exist_ok=True)
    agent.write_text(script)
    argv = [sys.executable, str(agent)]
    text = (
        f'[agents.hostile]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'
        f'[limits]\nworktrees = "{tmp_path / "worktrees"}"\n{config}'
    )
    keys = (
        f'repo = "{repo}"\ntask = "Fix add."\nagent = "hostile"\ncritic = "off"\n'
        "max_attempts = 1\nmax_nudges = 0\n"
    )
    if "done_when" not in loop:
        keys += 'done_when = ["python3 check.py"]\n'
    if "skip_if_done" not in loop:
        keys += "skip_if_done = false\n"
    return make_home(tmp_path / "home", text, {"calc": keys + loop}), repo


def once_record(home: Path, loop: str = "calc") -> dict:
    """`loopd once LOOP` as a real process; the run's run.toml."""
    import tomllib

    from tests.helpers import loopd

    proc = loopd(home, "once", loop, timeout=300)
    run_id = proc.stdout.split()[0] if proc.stdout.split() else ""
    record = home / "state" / "runs" / run_id / "run.toml"
    assert run_id and record.is_file(), proc.stdout + proc.stderr
    return tomllib.loads(record.read_text())
