"""The README's two commands, as written, in a fresh copy of the checkout, with an empty HOME
and nothing of this process's environment (`env -i`): the first with Debian's own python3
(externally managed: PEP 668) and with the Python the tests run on (pyenv's here); the second
in its `--smoke` form. When the README changes, these run the new text."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, git, runs, wait_for
from tests.layouts import require_debian_python
from tests.sandboxing import require_bwrap


def readme_commands() -> list[str]:
    """The lines of the first shell block under "## Two commands", comments kept."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Two commands") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "README.md: no ```sh block under ## Two commands"
    return [line for line in block.group(1).splitlines() if line.strip()]


def _fresh_copy(where: Path) -> Path:
    """The checkout as a fresh clone has it: its tracked and not-ignored files, committed."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.split(b"\0")
    where.mkdir()
    for name in (n.decode() for n in listed if n):
        source = ROOT / name
        if not source.is_file() or source.is_symlink():
            continue
        target = where / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())
        target.chmod(source.stat().st_mode & 0o777)
    git(where, "init", "-q", "-b", "main")
    git(where, "add", "-A")
    git(where, "commit", "-q", "-m", "fresh clone")
    return where


def _bare_env(user: Path, path: str) -> dict[str, str]:
    """`env -i` and what a login gives: PATH, HOME, LANG; pip's cache, to spare the network."""
    return {
        "PATH": path,
        "HOME": str(user),
        "LANG": "C.UTF-8",
        "PIP_CACHE_DIR": os.path.expanduser("~/.cache/pip"),
    }


def _site_listing(python: str) -> list[str]:
    """What the interpreter's own site folders hold (a system-wide install would change it)."""
    code = (
        "import site, os\n"
        "for d in site.getsitepackages():\n"
        "    print(d, sorted(os.listdir(d)) if os.path.isdir(d) else None)\n"
    )
    proc = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, timeout=60, env={"PATH": "/bin"}
    )
    return proc.stdout.splitlines()


def _interpreters() -> list[tuple[str, str]]:
    """(name, folder put first on PATH): Debian's, and the tests' own when it is another."""
    found = [("debian", "/usr/bin")]
    base = Path(sys.base_prefix) / "bin"
    if (base / "python3").exists() and base.resolve() != Path("/usr/bin"):
        found.append(("tests-python", str(base)))
    return found


@pytest.mark.parametrize("name,folder", _interpreters(), ids=[i[0] for i in _interpreters()])
def test_the_first_command_runs_the_example_to_success(
    tmp_path: Path, name: str, folder: str
) -> None:
    require_bwrap()
    require_debian_python()
    first = readme_commands()[0]
    clone = _fresh_copy(tmp_path / "clone")
    user = tmp_path / "user"
    user.mkdir()
    python = f"{folder}/python3"
    before = _site_listing(python)
    log_path = tmp_path / "first.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", first],
            cwd=clone,
            env=_bare_env(user, f"{folder}:/usr/bin:/bin"),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        wait_for(
            lambda: "Your own loop:" in log_path.read_text() or proc.poll() is not None,
            timeout=600,
            what="the example's summary",
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    output = log_path.read_text()
    assert "loopd: the example ran" in output, output[-3000:]
    (run,) = runs(clone)
    assert run["outcome"] == "succeeded", output[-3000:]
    assert "execvp" not in output and "externally-managed" not in output
    assert (clone / ".venv" / "bin" / "loopd").exists()
    # loopd is not on this PATH: the summary names the command as it can be typed here.
    assert f"`.venv/bin/loopd show {run['id']}`" in output, output[-3000:]
    assert _site_listing(python) == before  # nothing installed system-wide


def test_the_second_command_in_its_smoke_form_installs_into_the_venv_and_tests(
    tmp_path: Path,
) -> None:
    require_debian_python()
    second = readme_commands()[1].split("#", 1)[0].strip()
    assert second == "bash .ci/run", second
    clone = _fresh_copy(tmp_path / "clone")
    user = tmp_path / "user"
    user.mkdir()
    before = _site_listing("/usr/bin/python3")
    proc = subprocess.run(
        ["/bin/sh", "-c", f"{second} --smoke"],
        cwd=clone,
        env=_bare_env(user, "/usr/bin:/bin"),
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert re.search(r"^\d+ passed", output.splitlines()[-1]), output[-2000:]
    assert (clone / ".venv" / "bin" / "pytest").exists()
    assert _site_listing("/usr/bin/python3") == before
