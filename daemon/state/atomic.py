"""Atomic writes: temporary file, fsync, rename, fsync of the folder; 0600 files, 0700 folders."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, BinaryIO

FILE_MODE = 0o600
DIR_MODE = 0o700


def ensure_dir(path: Path) -> Path:
    """Create `path` (and parents) as 0700 folders."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o777 != DIR_MODE:
        os.chmod(path, DIR_MODE)
    return path


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dirs(paths: Iterable[Path]) -> None:
    """fsync each folder once, after every change to them is made: on a journalling
    filesystem the first commits them all and the others find nothing left to write."""
    for path in dict.fromkeys(paths):
        fsync_dir(path)


@contextmanager
def atomic_writer(path: Path, durable: bool = True, sync_folder: bool = True) -> Iterator[BinaryIO]:
    """A file to write in pieces; it replaces `path` when the block ends without an error.

    `durable` False skips the fsyncs: the file survives loopd's crash, not the machine's.
    `sync_folder` False leaves the folder's fsync (the rename's durability) to the caller,
    who syncs several folders in one pass (`fsync_dirs`); the data is synced before the
    rename either way.
    """
    ensure_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable and sync_folder:
        fsync_dir(path.parent)


def write_atomic(
    path: Path, data: bytes | str, durable: bool = True, sync_folder: bool = True
) -> None:
    """Replace `path` with `data` so a reader sees the old file or the new one, never a part."""
    with atomic_writer(path, durable, sync_folder) as fh:
        fh.write(data.encode("utf-8") if isinstance(data, str) else data)


def open_private(path: Path, mode: str = "ab") -> IO[Any]:
    """Open a file for appending, created 0600."""
    ensure_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, FILE_MODE)
    return os.fdopen(fd, mode)
