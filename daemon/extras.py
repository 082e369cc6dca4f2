"""How to install one of loopd's extras: from the checkout loopd runs from, with its own pip.

Never `pip install 'loopd[...]'`: a different project holds the name `loopd` on the package
index, and a pip outside loopd's venv would install it, or install the extra where loopd
does not look.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

# daemon/ lies in the checkout (`pip install -e .`), beside its pyproject.toml.
CHECKOUT = Path(__file__).resolve().parent.parent


def install_command(extra: str) -> str:
    """The command that installs `extra` into the environment this loopd runs in."""
    target = shlex.quote(f"{CHECKOUT}[{extra}]")
    return f"{shlex.quote(sys.executable)} -m pip install -e {target}"
