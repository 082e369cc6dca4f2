"""Which folder is the home: `--home`, else `$LOOPD_HOME`, else the current folder.

Apart from home.py (which loads the configuration) so that the read commands' plain path
(daemon/plain/) finds the home without importing the models.
"""

from __future__ import annotations

import os
from pathlib import Path


class HomeNotFound(Exception):
    """No home could be resolved."""


def is_home(path: Path) -> bool:
    return (path / "loopd.toml").is_file() or (path / "loops").is_dir()


def home_path(explicit: str | None = None, cwd: Path | None = None) -> Path:
    """`--home DIR`, else `$LOOPD_HOME`, else the current folder when it is a home."""
    if explicit:
        path = Path(explicit).expanduser().resolve()
        if not path.is_dir():
            raise HomeNotFound(
                f"--home {explicit}: no such folder. Fix: run `loopd init {explicit}` first"
            )
        return path
    env = os.environ.get("LOOPD_HOME")
    if env:
        path = Path(env).expanduser().resolve()
        if not path.is_dir():
            raise HomeNotFound(
                f"LOOPD_HOME={env}: no such folder. Fix: run `loopd init {env}` or unset LOOPD_HOME"
            )
        return path
    here = (cwd or Path.cwd()).resolve()
    if is_home(here):
        return here
    raise HomeNotFound(
        f"{here} is not a loopd home (no loopd.toml or loops/). Fix: run `loopd init DIR` "
        "and pass --home DIR or set LOOPD_HOME=DIR"
    )
