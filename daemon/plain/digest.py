"""A loop file's short digest: what status.toml records of the file the daemon loaded, and
what the reloader and `status` compare with the file on disk."""

from __future__ import annotations

import hashlib
from pathlib import Path


def file_digest(path: Path) -> str:
    """A short hash of a file's bytes ("" when it cannot be read)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError:
        return ""
