"""A home naming the Temporal engine on an install without the extra: what to install, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from daemon.extras import install_command
from tests.helpers import loopd, make_home

TEMPORAL = '[engine]\nkind = "temporal"\naddress = "127.0.0.1:1"\n'
INSTALL = install_command("temporal")


def without_temporalio(tmp_path: Path) -> dict[str, str]:
    """An environment whose Python cannot import temporalio, as on an install without the extra."""
    shim = tmp_path / "shim" / "temporalio"
    shim.mkdir(parents=True)
    # First on the path, it stands in for the installed SDK and fails as a missing one does.
    (shim / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'temporalio'\", name='temporalio')\n"
    )
    return {"PYTHONPATH": str(shim.parent)}


def test_the_shim_hides_the_sdk(tmp_path: Path) -> None:
    """The environment the tests below use really cannot import temporalio."""
    env = {"PATH": "/usr/bin:/bin", **without_temporalio(tmp_path)}
    found = subprocess.run(
        [sys.executable, "-c", "import temporalio"], capture_output=True, text=True, env=env
    )
    assert found.returncode == 1
    assert "ModuleNotFoundError" in found.stderr


@pytest.mark.parametrize("command", ["run", "worker", "status"])
def test_a_command_names_the_extra_and_exits_2(tmp_path: Path, command: str) -> None:
    home = make_home(tmp_path / "home", TEMPORAL)
    result = loopd(home, command, env=without_temporalio(tmp_path))
    assert result.returncode == 2, result.stderr
    assert INSTALL in result.stderr
    assert str(home / "loopd.toml") in result.stderr
    assert "Traceback" not in result.stderr


def test_check_reports_it_as_an_error_of_loopd_toml(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", TEMPORAL)
    result = loopd(home, "check", env=without_temporalio(tmp_path))
    assert result.returncode == 2, result.stderr
    assert f"{home / 'loopd.toml'}: engine.kind:" in result.stdout
    assert INSTALL in result.stdout
    assert "Traceback" not in result.stderr


def test_check_with_the_sdk_installed_has_no_such_error(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", TEMPORAL)
    result = loopd(home, "check")
    assert result.returncode == 0, result.stdout
    assert INSTALL not in result.stdout + result.stderr
    assert "engine.kind" not in result.stdout
