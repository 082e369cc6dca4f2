"""The configuration's facts that `status` shows (cli/daemon.config_facts: errors, warnings,
the loops' schedules, the sandbox and limits this host gives), kept in
`state/cache/status-facts.json` by every `status` that read the configuration through the
models, and read back by the plain path while nothing they came from has changed.

What they came from, and so the key they are kept under: loopd.toml and each loop file
(inode, size, modification time), the calibrations in `state/calibration/`, loopd's version,
the user, PATH, the time zone and the bubblewrap on PATH; and, checked once the facts are
read, whether each loop's repository is still a folder with a `.git` (loading says so).
What the host allows (cgroups, user namespaces) is probed again at least hourly: the facts
expire after MAX_AGE.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import daemon
from daemon.state.atomic import ensure_dir, write_atomic

FACTS_FILE = Path("cache") / "status-facts.json"
MAX_AGE = 3600.0  # seconds: host facts are probed again at least this often


def _identity(path: Path | str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def _folder(path: Path, suffix: str) -> list[Any]:
    """Each file of `path` ending in `suffix`, with its identity, in name order."""
    try:
        names = sorted(n for n in os.listdir(path) if n.endswith(suffix))
    except OSError:
        return []
    return [[name, _identity(path / name)] for name in names]


def facts_key(root: Path) -> list[Any]:
    """What the facts of the home at `root` depend on, as plain values."""
    bwrap = shutil.which("bwrap")
    return [
        daemon.__version__,
        os.geteuid(),
        os.environ.get("TZ"),
        os.environ.get("PATH"),
        _identity("/etc/localtime"),
        [bwrap, _identity(bwrap) if bwrap else None],
        _identity(root / "loopd.toml"),
        _folder(root / "loops", ".toml"),
        _folder(root / "state" / "calibration", ".toml"),
    ]


def keep_facts(root: Path, facts: dict[str, Any], key: list[Any]) -> None:
    """Keep `facts`, read from the files whose identity is `key` (facts_key, taken before
    they were read), for the plain path: when the home has a state/ (a read command never
    makes one), and unless the same ones are kept already."""
    state_dir = root / "state"
    if not state_dir.is_dir():
        return
    path = state_dir / FACTS_FILE
    kept = _read(path)
    if kept is not None and kept.get("key") == key and kept.get("facts") == facts:
        if time.time() - kept.get("written", 0) < MAX_AGE / 2:
            return
    text = json.dumps({"key": key, "repos": _repos(facts), "written": time.time(), "facts": facts})
    try:
        ensure_dir(path.parent)
        write_atomic(path, text.encode(), durable=False)
    except OSError:
        pass  # a read-only state/: the full path answers every time


def read_facts(root: Path) -> dict[str, Any] | None:
    """The kept facts of the home at `root`, or None when none are kept for its files now."""
    kept = _read(root / "state" / FACTS_FILE)
    if kept is None or kept.get("key") != facts_key(root):
        return None
    if not 0 <= time.time() - kept.get("written", 0) < MAX_AGE:
        return None
    facts = kept.get("facts")
    if not isinstance(facts, dict) or kept.get("repos") != _repos(facts):
        return None
    return facts


def _repos(facts: dict[str, Any]) -> list[Any]:
    """Each loop's repository: whether it is a folder, and has a `.git`."""
    paths = sorted({loop.get("repo", "") for loop in facts.get("loops", {}).values()})
    return [[p, os.path.isdir(p), os.path.exists(os.path.join(p, ".git"))] for p in paths]


def _read(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None
