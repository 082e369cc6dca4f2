"""`[notify] command`: a program started with the message as its last argument, never a shell."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any

from daemon.people.notify.base import Notifier, NotifyError

# What a notifier gets from loopd's environment: what a desktop or a mail command needs to
# reach the person, never loopd's keys, tokens or the daemon's own channels.
_KEPT_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TZ",
    "TMPDIR",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XDG_RUNTIME_DIR",
    "DBUS_SESSION_BUS_ADDRESS",
)


class CommandNotifier(Notifier):
    """Runs `argv + [message]` with a short timeout; a non-zero exit is a failure."""

    name = "command"

    def __init__(self, argv: list[str], timeout: float = 10.0) -> None:
        if not argv:
            raise ValueError("[notify] command is empty")
        self.argv = list(argv)
        self.timeout = timeout

    def _env(self, payload: dict[str, Any]) -> dict[str, str]:
        env = {k: os.environ[k] for k in _KEPT_ENV if k in os.environ}
        # Details as data for scripts that want them; never interpreted by a shell here.
        for key, var in (("kind", "LOOPD_EVENT"), ("loop", "LOOPD_LOOP"), ("run", "LOOPD_RUN")):
            value = payload.get(key)
            if value:
                env[var] = str(value)
        return env

    def send(self, message: str, payload: dict[str, Any]) -> None:
        argv = [*self.argv, message]
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self._env(payload),
                start_new_session=True,  # its own group, so a timeout kills what it started
                close_fds=True,
            )
        except OSError as exc:
            raise NotifyError(f"[notify] command {argv[0]!r} cannot start: {exc}") from None
        try:
            _, err = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()
            raise NotifyError(
                f"[notify] command {argv[0]!r} did not finish within {self.timeout:g}s; killed"
            ) from None
        if proc.returncode != 0:
            tail = err.decode("utf-8", "replace").strip()[-300:]
            raise NotifyError(
                f"[notify] command {argv[0]!r} exited {proc.returncode}"
                + (f": {tail}" if tail else "")
            )
