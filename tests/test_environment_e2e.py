"""Environment failures are named, not nudged: a check that cannot run where loopd runs it (a
module or a program not found) ends the run before any agent starts, with cause
`environment`; loopd's own venv never takes the place of the person's `python3`. Real venvs
on a real PATH, real git, real pytest where it is installed, loopd as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

from tests.helpers import git, loopd, make_home, make_repo
from tests.machines import Machine, command_agent, loop_toml
from tests.test_engines import machines
from tests.test_parity import on_both

__all__ = ["machines"]  # a fixture, imported for pytest

APP = {
    "app.py": "def add(a, b):\n    return a - b\n",
    "tests/test_app.py": "import sys, pathlib\n"
    "sys.path.insert(0, str(pathlib.Path(__file__).parent.parent))\n"
    "from app import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
}
# The agent fixes the bug, and says where its `python3` and `loopd-tool` are.
AGENT = (
    "import os, pathlib, shutil\n"
    "p = pathlib.Path('app.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
    "pathlib.Path('seen.json').write_text(__import__('json').dumps({\n"
    "    'python3': shutil.which('python3') or '', 'tool': shutil.which('loopd-tool') or '',\n"
    "    'path': os.environ.get('PATH', '')}))\n"
)


def _home(tmp_path: Path, done_when: str, **keys: object) -> tuple[Path, Path]:
    repo = make_repo(tmp_path / "repo", APP)
    argv = [sys.executable, "-c", AGENT]
    config = f'[agents.fixer]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'
    loop = (
        f'repo = "{repo}"\ntask = "Make the tests pass."\nagent = "fixer"\n'
        f'done_when = {json.dumps([done_when])}\ncritic = "off"\nmax_attempts = 3\n'
    )
    loop += "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())
    return make_home(tmp_path / "home", config, {"app": loop}), repo


def _venv_without_pytest(folder: Path) -> Path:
    """A real venv of the person's (no pytest in it): its bin folder."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    return folder / "bin"


def _once(home: Path, path: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    proc = loopd(home, "once", "app", timeout=300, env={"PATH": path})
    run_id = proc.stdout.split()[0]
    record = home / "state" / "runs" / run_id / "run.toml"
    assert record.is_file(), proc.stdout + proc.stderr
    return proc, tomllib.loads(record.read_text())


def test_a_module_the_checks_interpreter_lacks_ends_the_run_before_any_agent(
    tmp_path: Path,
) -> None:
    home, repo = _home(tmp_path, "python3 -m pytest -q")
    bin_dir = _venv_without_pytest(tmp_path / "their-venv")
    proc, run = _once(home, f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert (run["outcome"], run["cause"]) == ("escalated", "environment"), run
    assert run.get("attempts", []) == [], "an agent ran (and was nudged) on an environment failure"
    reason = run["reason"]
    assert "done_when[0] `python3 -m pytest -q`" in reason, reason
    assert f"module `pytest` not found by {bin_dir}/python3" in reason, reason
    assert "Fix: install `pytest`" in reason and "PATH" in reason, reason
    assert "escalated (environment)" in proc.stdout or reason in proc.stdout, proc.stdout
    escalation = (home / "state" / "escalations" / f"{run['id']}.md").read_text()
    assert "no agent was started, no nudge spent" in escalation
    assert "loopd check --run-checks" in escalation
    assert "## The checks on the base (done-check.log)" in escalation
    assert f"{bin_dir}/python3: No module named pytest" in escalation
    assert git(repo, "branch", "--list", "loopd/*") == ""


def test_a_program_not_on_the_path_ends_the_run_and_a_failing_test_does_not(
    tmp_path: Path,
) -> None:
    missing = f"no-such-runner-{tmp_path.name}"
    home, _ = _home(tmp_path / "a", f"{missing} -q")
    _, run = _once(home, os.environ["PATH"])
    assert (run["outcome"], run["cause"]) == ("escalated", "environment"), run
    assert f"`{missing}` is not on the checks' PATH" in run["reason"], run["reason"]
    # A check that fails with an assertion on the base is the agent's work: it runs.
    check = "python3 -c 'import app; assert app.add(2, 3) == 5'"
    home, _ = _home(tmp_path / "b", check)
    _, run = _once(home, os.environ["PATH"])
    assert (run["outcome"], run["cause"]) == ("succeeded", "passed"), run


def test_loopds_own_venv_never_shadows_the_persons_python(tmp_path: Path) -> None:
    """The README's "put .venv/bin on your PATH": loopd's own venv is first on the PATH
    `loopd once` starts with, yet neither the checks nor the agent get its `python3`."""
    own_bin = str(Path(sys.prefix) / "bin")
    assert sys.prefix != sys.base_prefix, "loopd's tests run in its venv (.ci/run makes it)"
    # The check passes only where `python3` is not loopd's own.
    check = f'test "$(command -v python3)" != "{own_bin}/python3" && test -s seen.json'
    home, repo = _home(tmp_path, check)
    _, run = _once(home, f"{own_bin}{os.pathsep}{os.environ['PATH']}")
    assert (run["outcome"], run["cause"]) == ("succeeded", "passed"), run
    seen = json.loads(git(repo, "show", f"{run['branch']}:seen.json"))
    assert own_bin not in seen["path"].split(os.pathsep), seen
    assert not seen["python3"].startswith(own_bin), seen
    assert seen["tool"].endswith("loopd-tool"), seen  # loopd's tools stay reachable


def test_both_engines_name_an_environment_failure_alike(
    tmp_path: Path, temporal: Any, machines: list
) -> None:
    """The base's checks judged before any agent, on the local engine and on a Temporal
    worker: the same cause, the same reason, the same record (tests/parity.py)."""
    bin_dir = _venv_without_pytest(tmp_path / "their-venv")

    def setup(folder: Path, engine: str) -> Machine:
        root = folder / "machine"
        repo = make_repo(root / "src" / "app", APP)
        text = command_agent("a", AGENT) + f'\n[limits]\nworktrees = "{root / "worktrees"}"\n'
        loop = loop_toml(
            repo,
            task="Make the tests pass.",
            agent="a",
            done_when=["python3 -m pytest -q"],
            critic="off",
            max_attempts=2,
        )
        loop += f'env = {{ PATH = "{bin_dir}:{{PATH}}" }}\n'
        home = make_home(root / "loopd-home", text + engine, {"calc": loop})
        return Machine("machine", root, home, repo)

    def scenario(machine: Machine) -> int:
        machine.start("run")
        assert machine.loopd("trigger", "calc").returncode == 0
        return 1

    (run,) = on_both(tmp_path, temporal, machines, setup, scenario)
    assert (run["outcome"], run["cause"]) == ("escalated", "environment"), run
    assert run.get("attempts", []) == [], run
    assert f"module `pytest` not found by {bin_dir}/python3" in run["reason"], run


def test_check_run_checks_reports_the_environment_failure_as_the_loops_error(
    tmp_path: Path,
) -> None:
    home, repo = _home(tmp_path, "python3 -m pytest -q")
    bin_dir = _venv_without_pytest(tmp_path / "their-venv")
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    assert loopd(home, "check", env={"PATH": path}).returncode == 0  # not run: no error
    proc = loopd(home, "check", "--run-checks", timeout=300, env={"PATH": path})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "app: running setup and done_when on HEAD in the sandbox" in proc.stderr
    errors = [line for line in proc.stdout.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stdout
    assert errors[0].startswith(
        f"error: {home / 'loops' / 'app.toml'}: done_when[0]: `python3 -m pytest -q`: "
        f"module `pytest` not found by {bin_dir}/python3"
    ), errors
    assert "Fix: install `pytest`" in errors[0]
    # A failing test on the base is not an error of the file; nothing is left behind.
    (home / "loops" / "app.toml").write_text(
        (home / "loops" / "app.toml")
        .read_text()
        .replace("python3 -m pytest -q", "python3 -c 'import app; assert app.add(2, 3) == 5'")
    )
    proc = loopd(home, "check", "--run-checks", timeout=300, env={"PATH": path})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "app: 0 of 1 check(s) pass on its base" in proc.stderr
    assert list((tmp_path / "worktrees" / "app").iterdir()) == []
    assert git(repo, "status", "--porcelain") == ""
