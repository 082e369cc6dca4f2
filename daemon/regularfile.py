"""Files loopd reads are files: regular, within the home, and of a bounded size.

A rule file, a loop file, `loopd.toml` or a state file that is a FIFO, a device or a link
to one (`/dev/zero`) would hang a read, or never end it; a link out of the home would let
anyone who can write the home read elsewhere. `read_regular` refuses each of them with
`NotRegular` (an OSError, so readers that already skip an unreadable file skip these too),
whose message names the file and what to do.

The path is resolved (links inside `within` are followed; none when there is no `within`),
checked with `stat` before it is opened, so a FIFO or a device is never opened, then opened
without following a last link and without blocking, and checked again on the open
descriptor: what was swapped in between is refused the same way.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

KB = 1000
MB = 1000 * KB
# The size caps (docs/configuration.md, "How a home is read"): far above any real file.
CONFIG_MAX = 1 * MB  # loopd.toml, a loop file, a rule file
STATE_MAX = 16 * MB  # a state file read back: run.toml, status.toml, the queue, a trigger


class NotRegular(OSError):
    """A file loopd will not read: not a regular file, a link out of the home, too large."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(reason)
        self.path = path
        self.reason = reason
        self.strerror = reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def check_regular(path: Path, within: Path | None = None, cap: int = CONFIG_MAX) -> Path:
    """The path to open for `path` when it may be read; NotRegular saying why not.

    With `within`, links are followed while they stay inside it; without, no link is (a
    state file is never one: loopd writes them). FileNotFoundError when it does not exist.
    """
    path = Path(path)
    if within is None:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            raise NotRegular(
                path, f"a link to {os.readlink(path)}; loopd writes this file itself and "
                "reads no link in its place: remove the link"
            )  # fmt: skip
        _refuse(path, path, info, cap)
        return path
    real = Path(os.path.realpath(path))
    bound = Path(os.path.realpath(within))
    if real != bound and bound not in real.parents:
        raise NotRegular(
            path,
            f"a link to {real}, outside {bound}; loopd reads no file through a link out "
            "of its home: copy the file in place of the link",
        )
    _refuse(path, real, os.stat(real), cap)
    return real


def _size(cap: int) -> str:
    return f"{cap // MB} MB" if cap % MB == 0 else f"{cap // KB} KB"


def _refuse(path: Path, real: Path, info: os.stat_result, cap: int) -> None:
    if not stat.S_ISREG(info.st_mode):
        shown = f"{_kind(info.st_mode)} ({real})" if path.is_symlink() else _kind(info.st_mode)
        raise NotRegular(path, f"{shown}, not a regular file; replace it with a file or remove it")
    if info.st_size > cap:
        raise NotRegular(
            path,
            f"{info.st_size} bytes, over the {_size(cap)} loopd reads of such a file; "
            "shorten it or remove it",
        )


def read_regular(path: Path, within: Path | None = None, cap: int = CONFIG_MAX) -> bytes:
    """The bytes of `path`, a regular file of at most `cap` bytes inside `within`."""
    real = check_regular(path, within, cap)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(real, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last part became a link since it was resolved
            raise NotRegular(path, "became a link while loopd read it; read again") from None
        raise
    with os.fdopen(fd, "rb") as fh:
        _refuse(Path(path), real, os.fstat(fd), cap)
        data = fh.read(cap + 1)
    if len(data) > cap:
        raise NotRegular(path, f"grew past the {_size(cap)} loopd reads while it was read")
    return data
