"""The real agent CLIs the live tests drive, found where `.ci/run` installs them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.helpers import ROOT


def find_program(name: str, env_var: str, *also: Path) -> Path | None:
    """`name`'s executable: $`env_var`, the checkout's node_modules/.bin (where .ci/run puts
    the pinned CLIs), the places in `also`, or PATH; None when none is executable."""
    for candidate in (
        os.environ.get(env_var, ""),
        str(ROOT / "node_modules" / ".bin" / name),
        *(str(path) for path in also),
        shutil.which(name) or "",
    ):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None
