"""Which state the read commands read, told without the models: this home's own `state/`
(the local engine, or a local daemon that holds the home), else None (the full path asks
the engine)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from daemon.state.lock import HomeLock


def read_toml(path: Path) -> dict[str, Any] | None:
    """A TOML file's table; None when it is missing or not TOML (the full path says why)."""
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None


def daemon_pid(state_dir: Path) -> int | None:
    """The pid of the daemon running for this home, or None (as cli/common.daemon_pid)."""
    lock = HomeLock(state_dir / "loopd.lock")
    return (lock.holder() or -1) if lock.is_held() else None


def reads_own_state(root: Path) -> bool:
    """Whether the commands read `root/state/` itself: a local daemon holds the home, or
    loopd.toml's `[engine] kind` is the local one. False when only the models can tell
    (another engine, or a loopd.toml that is not plain TOML)."""
    state_dir = root / "state"
    lock = HomeLock(state_dir / "loopd.lock")
    if lock.is_held():
        status = read_toml(state_dir / "status.toml") or {}
        daemon = status.get("daemon") or {}
        if daemon.get("engine") == "local" and daemon.get("pid") == lock.holder():
            return True
    config_path = root / "loopd.toml"
    if not config_path.exists():
        return True
    config = read_toml(config_path)
    if config is None:
        return False
    engine = config.get("engine", {})
    return isinstance(engine, dict) and engine.get("kind", "local") == "local"
