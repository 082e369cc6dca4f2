"""Where developers keep their Python, rebuilt under a fake HOME: pyenv, uv, a venv, a shim.

The interpreter is Debian's own (`/usr/bin/python3.11`, statically linked, with its standard
library in `/usr/lib/python3.11`), hard-linked into the fake HOME (copied where a hard link
cannot be made), so its real path lies under that HOME as it does with pyenv, uv or conda.
loopd's dependencies come from the test interpreter's own site folders through a `.pth` file:
that Python can run loopd outside the sandbox, while inside it those folders stay hidden.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DEBIAN_PYTHON = Path("/usr/bin/python3.11")
DEBIAN_STDLIB = Path("/usr/lib/python3.11")


def link_or_copy(source: str, target: str) -> str:
    """A hard link of `source` at `target`, or a copy where no link can be made."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
    return target


def require_debian_python() -> None:
    """Fail (never skip) where the interpreter these layouts are built from is missing."""
    if not (DEBIAN_PYTHON.is_file() and (DEBIAN_STDLIB / "os.py").is_file()):
        pytest.fail(
            f"{DEBIAN_PYTHON} with its standard library in {DEBIAN_STDLIB} is needed to build "
            "a Python under a fake HOME (Debian: apt-get install python3 python3-venv)"
        )


def python_install(prefix: Path) -> Path:
    """A Python installation at `prefix` (bin/python3.11 and bin/python3, lib/python3.11)
    that can import loopd and its dependencies; its `bin/python3`."""
    require_debian_python()
    (prefix / "bin").mkdir(parents=True)
    link_or_copy(str(DEBIAN_PYTHON), str(prefix / "bin" / "python3.11"))
    (prefix / "bin" / "python3").symlink_to("python3.11")
    shutil.copytree(
        DEBIAN_STDLIB,
        prefix / "lib" / "python3.11",
        copy_function=link_or_copy,
        ignore=shutil.ignore_patterns("__pycache__", "EXTERNALLY-MANAGED", "test"),
    )
    python = prefix / "bin" / "python3"
    _add_test_site(python)
    return python


def venv(base_python: Path, where: Path) -> Path:
    """A venv at `where` made by `base_python` (its bin/python3 links to it); its python3."""
    subprocess.run(
        [str(base_python), "-m", "venv", "--without-pip", str(where)],
        check=True,
        capture_output=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(where.parent)},
    )
    python = where / "bin" / "python3"
    _add_test_site(python)
    return python


def shim(root: Path, real: Path) -> Path:
    """A pyenv-like shim folder at `root/shims`: `python3` there execs `real`; the folder."""
    shims = root / "shims"
    shims.mkdir(parents=True)
    libexec = root / "libexec"
    libexec.mkdir()
    # As pyenv's: the shim runs the manager's own program, which finds the version.
    (libexec / "manager").write_text(
        f'#!/bin/sh\nprogram="$1"; shift\nexec "{real.parent}/$program" "$@"\n'
    )
    (libexec / "manager").chmod(0o755)
    (shims / "python3").write_text(
        f'#!/usr/bin/env bash\nexec "{libexec}/manager" "${{0##*/}}" "$@"\n'
    )
    (shims / "python3").chmod(0o755)
    return shims


def _add_test_site(python: Path) -> None:
    """Let `python` import what the test interpreter can (loopd's dependencies)."""
    found = subprocess.run(
        [str(python), "-c", "import site; print(site.getsitepackages()[0])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    ).stdout.strip()
    site = Path(found)
    site.mkdir(parents=True, exist_ok=True)
    ours = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    (site / "loopd-tests.pth").write_text("\n".join(ours) + "\n")
