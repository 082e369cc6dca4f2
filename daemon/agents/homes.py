"""The agent's HOME: one per run, in the run's scratch folder, seeded with its login files.

Each adapter declares the files under HOME that log it in (`login_files`), which of them the
agent may refresh (`credential_files`: OAuth tokens), and where it writes its own config and
sessions (`config_paths`). A run's HOME starts with copies of the login files and the
config folders, and lives until the run ends (a resumed session finds its files). At the
end only a refreshed credential file goes back to the real HOME, and only when the real one
still holds what was copied out: settings, hooks and MCP configuration an agent wrote never
leave its HOME, so nothing it plants reaches the next run or the person.

What was copied is recorded by loopd outside the agent's reach (the run's record), so the
agent cannot redirect the copy back.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from daemon.state.records import SeededFile

MAX_LOGIN_FILE = 1_000_000  # bytes; a login file larger than this is not copied


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_regular(path: Path, limit: int = MAX_LOGIN_FILE) -> bytes | None:
    """A regular file's bytes (following no symlink at its last component), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not (info.st_mode & 0o170000 == 0o100000) or info.st_size > limit:
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(limit + 1)[:limit]
    except OSError:
        return None
    finally:
        os.close(fd)


def _write_private(path: Path, data: bytes) -> None:
    """Write a 0600 file through a temporary name, so a reader never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.loopd-tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def seed_home(
    home: Path,
    real_home: Path,
    login_files: tuple[str, ...],
    credential_files: tuple[str, ...],
    config_paths: tuple[str, ...],
) -> list[SeededFile]:
    """Make a run's HOME with copies of the login files and the config folders."""
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    for rel in config_paths:
        if rel.endswith("/"):
            (home / rel).mkdir(parents=True, exist_ok=True, mode=0o700)
    seeded = []
    for rel in login_files:
        data = _read_regular(Path(os.path.realpath(real_home / rel)))
        if data is None:
            continue
        _write_private(home / rel, data)
        seeded.append(SeededFile(path=rel, sha256=_digest(data), copy_back=rel in credential_files))
    return seeded


def return_credentials(home: Path, real_home: Path, seeded: list[SeededFile]) -> list[str]:
    """Copy refreshed credential files back to the real HOME; returns the paths copied.

    `home` is the run's HOME as loopd made it (resolved).
    """
    returned = []
    for item in seeded:
        if not item.copy_back:
            continue
        copy = home / item.path
        # No symlink anywhere on the way: the agent may have replaced a folder with one.
        if os.path.realpath(copy) != str(copy):
            continue
        data = _read_regular(copy)
        if data is None or _digest(data) == item.sha256 or not _plausible(item.path, data):
            continue
        target = Path(os.path.realpath(real_home / item.path))
        current = _read_regular(target)
        if current is None or _digest(current) != item.sha256:
            continue  # changed since (a person logged in again): theirs wins
        _write_private(target, data)
        returned.append(item.path)
    return returned


def _plausible(path: str, data: bytes) -> bool:
    """A credential file in its format: a JSON file must hold a JSON object."""
    if not path.endswith(".json"):
        return True
    try:
        return isinstance(json.loads(data), dict)
    except ValueError:
        return False
