"""The README's first command where developers keep their tools: a Python under HOME (pyenv,
uv, a venv of either, a version manager's shim) runs the embedded example under the real
bubblewrap, and a program in a place of the deny list is refused by name before it starts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from daemon.example import PACKAGE_DIR
from tests.helpers import ROOT, daemon_log, runs, stop_daemon, wait_for
from tests.layouts import link_or_copy, python_install, shim, venv
from tests.sandboxing import require_bwrap


def _checkout(user: Path) -> Path:
    """The checkout as a fresh clone has it, at ~/p of the fake HOME: a home with the package."""
    home = user / "p"
    home.mkdir(parents=True)
    shutil.copytree(
        PACKAGE_DIR.parent, home / "daemon", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "loopd.toml", home / "loopd.toml")
    shutil.copytree(ROOT / "loops", home / "loops")
    shutil.copytree(ROOT / "rules", home / "rules")
    return home


def _env(user: Path, path: str) -> dict[str, str]:
    return {"HOME": str(user), "PATH": path, "LANG": "C.UTF-8"}


def _run_example(home: Path, python: Path, env: dict[str, str], daemons: list) -> tuple[dict, str]:
    """`PYTHON -m daemon.cli.main --home . run` in the checkout until the example's summary."""
    with open(home / "daemon.log", "a") as log:
        proc = subprocess.Popen(
            [str(python), "-m", "daemon.cli.main", "--home", ".", "run"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=home,
            text=True,
        )
    daemons.append(proc)
    wait_for(
        lambda: "Your own loop:" in daemon_log(home) or proc.poll() is not None,
        timeout=120,
        what="the example's summary",
    )
    stop_daemon(proc)
    log = daemon_log(home)
    assert "execvp" not in log, log
    (run,) = runs(home)
    return run, log


def _check(home: Path, python: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-m", "daemon.cli.main", "--home", ".", "check", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=home,
        stdin=subprocess.DEVNULL,
    )


def _shows(home: Path, python: Path, env: dict[str, str]) -> list[str]:
    checked = _check(home, python, env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return json.loads(checked.stdout)["sandbox"]["shows"]["example"]


def test_a_venv_whose_interpreter_lives_under_home_runs_the_example(
    tmp_path: Path, daemons: list
) -> None:
    require_bwrap()
    user = tmp_path / "user"
    base = python_install(user / ".pyenv" / "versions" / "3.11")
    home = _checkout(user)
    python = venv(base, home / ".venv")
    # As an activated venv: its bin/ first on the PATH, so the checks' python3 is the venv's.
    env = _env(user, f"{home / '.venv' / 'bin'}:/usr/bin:/bin")
    shows = _shows(home, python, env)
    assert "~/p/.venv: virtual environment of ~/p/.venv/bin/python3 (agent)" in shows, shows
    assert "~/.pyenv/versions/3.11: interpreter of ~/p/.venv/bin/python3 (agent)" in shows
    assert not any(line.startswith(("~:", "~/p:", "~/.ssh")) for line in shows), shows
    run, log = _run_example(home, python, env, daemons)
    assert run["outcome"] == "succeeded", log
    assert run["attempts"][0]["checks_passed"] is True


def test_a_pyenv_shim_runs_the_example_and_its_checks(tmp_path: Path, daemons: list) -> None:
    require_bwrap()
    user = tmp_path / "user"
    real = python_install(user / ".pyenv" / "versions" / "3.11")
    shims = shim(user / ".pyenv", real)
    home = _checkout(user)
    env = _env(user, f"{shims}:/usr/bin:/bin")
    shows = _shows(home, shims / "python3", env)
    assert "~/.pyenv: version manager of ~/.pyenv/shims/python3 (done_when[0])" in shows, shows
    run, log = _run_example(home, shims / "python3", env, daemons)
    assert run["outcome"] == "succeeded", log
    # The checks' python3 was the shim's interpreter, not the system's: it ran from ~/.pyenv.
    checks = next((home / "state" / "runs" / run["id"]).rglob("checks.log")).read_text()
    assert "Ran 3 tests" in checks or "OK" in checks, checks


def test_a_uv_layout_runs_the_example(tmp_path: Path, daemons: list) -> None:
    require_bwrap()
    user = tmp_path / "user"
    uv_python = user / ".local" / "share" / "uv" / "python" / "cpython-3.11-linux-x86_64-gnu"
    base = python_install(uv_python)
    home = _checkout(user)
    python = venv(base, home / ".venv")
    env = _env(user, f"{home / '.venv' / 'bin'}:/usr/bin:/bin")
    shows = _shows(home, python, env)
    want = "~/.local/share/uv/python/cpython-3.11-linux-x86_64-gnu: interpreter of"
    assert any(line.startswith(want) for line in shows), shows
    assert not any(line.startswith(("~/.local:", "~/.local/share:")) for line in shows), shows
    run, log = _run_example(home, python, env, daemons)
    assert run["outcome"] == "succeeded", log


def test_a_program_in_a_denied_folder_is_refused_by_name(tmp_path: Path, daemons: list) -> None:
    require_bwrap()
    user = tmp_path / "user"
    base = python_install(user / ".pyenv" / "versions" / "3.11")
    home = _checkout(user)
    python = venv(base, home / ".venv")
    hidden = user / ".ssh" / "tools"
    hidden.mkdir(parents=True)
    (user / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    agent = hidden / "agent"
    agent.write_text("#!/bin/sh\necho hello\n")
    agent.chmod(0o755)
    (home / "loopd.toml").write_text(
        (home / "loopd.toml").read_text()
        + f'\n[agents.mine]\nadapter = "command"\ncommand = ["{agent}", "{{prompt}}"]\n'
    )
    loop = home / "loops" / "example.toml"
    loop.write_text(loop.read_text().replace('agent = "example"', 'agent = "mine"'))
    env = _env(user, f"{home / '.venv' / 'bin'}:/usr/bin:/bin")
    checked = _check(home, python, env)
    assert checked.returncode == 2, checked.stdout
    (error,) = json.loads(checked.stdout)["errors"]
    assert error["key"] == "agent" and error["file"].endswith("loops/example.toml")
    assert "~/.ssh" in error["message"] and "deny list" in error["message"]
    assert "docs/configuration.md#sandbox" in error["fix"]
    run, log = _run_example(home, python, env, daemons)
    assert run["outcome"] == "escalated"
    assert "cannot run in the sandbox" in log and "~/.ssh" in log, log


@pytest.mark.parametrize("layout", ["nvm", "uv-tool"])
def test_tools_under_home_start_in_the_sandbox(tmp_path: Path, layout: str) -> None:
    """A CLI installed under HOME (npm -g under nvm, `uv tool install`) runs sandboxed."""
    require_bwrap()
    from daemon.sandbox.base import Exposure
    from daemon.sandbox.bwrap import BwrapSandbox
    from daemon.sandbox.paths import home_folders
    from daemon.sandbox.programs import resolve_program

    user = tmp_path / "user"
    if layout == "nvm":
        node = shutil.which("node")
        assert node, "node is needed (the qwen CLI's runtime)"
        prefix = user / ".nvm" / "versions" / "node" / "v20"
        (prefix / "bin").mkdir(parents=True)
        link_or_copy(os.path.realpath(node), str(prefix / "bin" / "node"))
        package = prefix / "lib" / "node_modules" / "tool"
        package.mkdir(parents=True)
        (package / "cli.js").write_text("#!/usr/bin/env node\nconsole.log('tool ran')\n")
        (package / "cli.js").chmod(0o755)
        (prefix / "bin" / "tool").symlink_to("../lib/node_modules/tool/cli.js")
        search = f"{prefix / 'bin'}:/usr/bin:/bin"
    else:
        base = python_install(user / ".local" / "share" / "uv" / "python" / "cpython-3.11")
        tool = user / ".local" / "share" / "uv" / "tools" / "tool"
        python = venv(base, tool)
        script = tool / "bin" / "tool"
        script.write_text(f"#!{python}\nprint('tool ran')\n")
        script.chmod(0o755)
        (user / ".local" / "bin").mkdir(parents=True)
        (user / ".local" / "bin" / "tool").symlink_to(script)
        search = f"{user / '.local' / 'bin'}:/usr/bin:/bin"
    environ = {"HOME": str(user), "PATH": search}
    homes = home_folders(environ) | {user}
    resolved = resolve_program("tool", search, homes)
    assert resolved.problem == "" and resolved.found is not None
    assert user not in resolved.paths and user / ".local" not in resolved.paths
    work = tmp_path / "work"
    work.mkdir()
    exposure = Exposure(cwd=work, writable=(work,)).adding(
        readable=resolved.paths, tools=resolved.venvs
    )
    launch = BwrapSandbox().launch(["tool"], {"PATH": search, "HOME": str(work)}, exposure)
    try:
        proc = subprocess.run(
            launch.argv,
            env=launch.env,
            pass_fds=launch.pass_fds,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    finally:
        launch.close()
    assert proc.stdout.strip() == "tool ran", proc.stderr
