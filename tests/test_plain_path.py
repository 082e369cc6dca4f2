"""The read commands' plain path (daemon/plain/, `cli/plain*.py`): it imports no pydantic,
and where it answers it prints what the full path prints, byte for byte."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def plain_modules() -> list[str]:
    """Every module of the plain path: daemon/plain/ and the commands' cli/plain*.py."""
    # tables.py writes generated.py from the models: a command, not part of the plain path.
    plain = (ROOT / "daemon" / "plain").glob("*.py")
    names = [f"daemon.plain.{p.stem}" for p in plain if p.stem != "tables"]
    names += [f"daemon.cli.{p.stem}" for p in (ROOT / "daemon" / "cli").glob("plain*.py")]
    return sorted(n.removesuffix(".__init__") for n in names)


def test_plain_path_imports_no_models() -> None:
    """Importing every plain module (and `loopd`'s entry point) loads no pydantic."""
    code = (
        "import importlib, sys\n"
        f"for name in {plain_modules()!r} + ['daemon.cli.main']:\n"
        "    importlib.import_module(name)\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0].startswith('pydantic'))\n"
        "print(' '.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
