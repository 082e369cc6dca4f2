"""One daemon per home, one runner per loop: open-file-description locks on lock files.

The lock is an OFD write lock (`F_OFD_SETLK`): like flock it belongs to the open file, not
the process, and the fd is close-on-exec, so agents never hold it. Unlike flock it can be
probed without being taken: `F_OFD_GETLK` asks the kernel whether a lock would conflict. A
probe that took a shared lock for a moment (the old way) could make a real `acquire` in
another process fail while it held it.
"""

from __future__ import annotations

import fcntl
import os
import struct
from pathlib import Path

from daemon.state.atomic import FILE_MODE, ensure_dir

# struct flock on 64-bit Linux: l_type, l_whence (short), l_start, l_len (off_t), l_pid (int),
# padded to 32 bytes. l_pid must be 0 for the OFD commands.
_FLOCK = struct.Struct("@hhqqi4x")


def _request(kind: int) -> bytes:
    return _FLOCK.pack(kind, os.SEEK_SET, 0, 0, 0)  # the whole file


class LockHeld(Exception):
    """Another process holds the home's lock."""

    def __init__(self, path: Path, pid: int | None) -> None:
        self.path = path
        self.pid = pid
        who = f"pid {pid}" if pid else "another process"
        super().__init__(f"{who} already runs loopd for this home (lock {path})")


class HomeLock:
    """Exclusive lock of a home (or of a loop); the fd is close-on-exec."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        ensure_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _request(fcntl.F_WRLCK))
        except OSError:  # EAGAIN or EACCES: held elsewhere
            os.close(fd)
            raise LockHeld(self.path, self.holder()) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.fcntl(self._fd, fcntl.F_OFD_SETLK, _request(fcntl.F_UNLCK))
            os.close(self._fd)
            self._fd = None

    def holder(self) -> int | None:
        """The pid written by the holder, or None when nobody holds the lock."""
        try:
            text = self.path.read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def is_held(self) -> bool:
        """Whether some process (possibly this one) holds the lock now; takes no lock."""
        if self._fd is not None:
            return True
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _request(fcntl.F_WRLCK))
        finally:
            os.close(fd)
        return bool(_FLOCK.unpack(answer)[0] != fcntl.F_UNLCK)

    def __enter__(self) -> HomeLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
