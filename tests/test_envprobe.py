"""What counts as the environment's failure of a check, and what never does: the outputs of
real runs (dash, bash, python's `-m`, pytest) judged by `environment_failure`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from daemon.agents.environment import without_loopd_venv
from daemon.runparts.checks import CheckResult, ChecksResult
from daemon.runs.envprobe import environment_failure


def _ran(command: str, cwd: Path, path: str) -> ChecksResult:
    """`command` as a check runs it (`/bin/sh -c`), its output and exit code."""
    done = subprocess.run(
        ["/bin/sh", "-c", command],
        cwd=cwd,
        env={"PATH": path, "HOME": str(cwd)},
        capture_output=True,
        text=True,
    )
    result = CheckResult(command, done.returncode, 0.1, False, done.stdout + done.stderr)
    return ChecksResult(results=[result])


def test_a_missing_interpreter_module_and_program_are_the_environments(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    path = f"{venv / 'bin'}{os.pathsep}/usr/bin:/bin"
    found = environment_failure(_ran("python3 -m pytest -q", tmp_path, path), path)
    assert found is not None and found.key == "done_when[0]"
    assert (found.program, found.interpreter) == ("pytest", f"{venv}/bin/python3")
    found = environment_failure(_ran("cd . && no-such-tool-x -q", tmp_path, path), path)
    assert found is not None and found.program == "no-such-tool-x"
    assert "is not on the checks' PATH" in found.why
    # loopd's own interpreter, named by a loop, is said to be loopd's
    own = _ran(f"{sys.executable} -m no_such_module_x", tmp_path, path)
    found = environment_failure(own, path)
    assert found is not None and "loopd's own venv" in found.why, found
    # bash's wording too
    done = ChecksResult(
        [CheckResult("pytest", 127, 0.1, False, "sh: line 1: pytest: command not found\n")]
    )
    assert environment_failure(done, path) is not None


def test_failures_an_agent_may_mend_are_never_the_environments(tmp_path: Path) -> None:
    path = f"{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin"
    (tmp_path / "check.py").write_text("import notyet\n")  # the task may be to write it
    (tmp_path / "test_a.py").write_text("import notyet\n\ndef test_a():\n    assert 1 == 2\n")
    cases = [
        "python3 -c 'assert 1 == 2'",
        "./run.sh",  # a script the agent may be meant to write
        f"{sys.executable} check.py",
        f"{sys.executable} -m pytest -q -p no:cacheprovider test_a.py",
        "exit 127",
    ]
    for command in cases:
        checks = _ran(command, tmp_path, path)
        assert not checks.passed, command
        assert environment_failure(checks, path) is None, (command, checks.results[0].output)


def test_permission_denied_counts_only_on_a_path_the_sandbox_hides(tmp_path: Path) -> None:
    hidden = tmp_path / "home" / ".ssh"
    output = f"/bin/sh: 1: cannot open {hidden}/id: Permission denied\n"
    checks = ChecksResult([CheckResult("cat x", 2, 0.1, False, output)])
    assert environment_failure(checks, "/bin", (hidden,)) is not None
    assert environment_failure(checks, "/bin", (tmp_path / "elsewhere",)) is None


def test_loopds_own_venv_leaves_a_path_and_nothing_else() -> None:
    own = str(Path(sys.prefix) / "bin")
    assert without_loopd_venv(f"{own}:/usr/bin:{own}/:/bin") == "/usr/bin:/bin"
    assert without_loopd_venv("/usr/bin:/bin") == "/usr/bin:/bin"
