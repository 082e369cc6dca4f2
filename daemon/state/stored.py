"""Attempt files kept compressed: a finished run's `transcript.jsonl` becomes
`transcript.jsonl.gz` (one JSON object a line compresses about tenfold; an agent that
printed 20 MB left a 37 MB transcript). Readers name the plain file and get its bytes
either way; citations, evidence and `loopd logs` keep saying `transcript.jsonl`.
"""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path
from typing import BinaryIO, cast

from daemon.state.atomic import FILE_MODE

SUFFIX = ".gz"


def compressed_path(path: Path) -> Path:
    return path.with_name(path.name + SUFFIX)


def stored(path: Path) -> Path:
    """`path`, or its compressed form when only that exists."""
    if path.exists():
        return path
    packed = compressed_path(path)
    return packed if packed.exists() else path


def is_stored(path: Path) -> bool:
    """Whether `path` exists as a file, plain or compressed."""
    return stored(path).is_file()


def open_stored(path: Path) -> BinaryIO:
    """`path` opened to read its bytes, decompressed when it is kept compressed."""
    found = stored(path)
    if found.name.endswith(SUFFIX) and not path.name.endswith(SUFFIX):
        return cast(BinaryIO, gzip.open(found, "rb"))  # a GzipFile reads as a binary file
    return found.open("rb")


def compress(path: Path) -> int:
    """Replace `path` by `PATH.gz` (written whole first, so a crash leaves one of them
    complete); the bytes saved, 0 when there was nothing to compress."""
    if path.is_symlink() or not path.is_file():
        return 0
    packed = compressed_path(path)
    partial = packed.with_name(packed.name + ".partial")
    before = path.stat().st_size
    with path.open("rb") as src, open(partial, "wb") as raw:
        os.fchmod(raw.fileno(), FILE_MODE)
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(partial, packed)
    path.unlink()
    return before - packed.stat().st_size
