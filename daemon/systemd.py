"""systemd: the notify protocol over NOTIFY_SOCKET, the watchdog heartbeat, and the user unit.

The protocol is small enough to speak directly (no libsystemd): one datagram of
`KEY=VALUE` lines to the AF_UNIX socket named by NOTIFY_SOCKET; a leading '@' names the
abstract namespace. See sd_notify(3).
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path


class SystemdNotifier:
    """Sends READY, STATUS, WATCHDOG, STOPPING and RELOADING to the service manager."""

    def __init__(
        self,
        address: str,
        watchdog_usec: int | None = None,
        watchdog_pid: int | None = None,
    ) -> None:
        self.address = address
        self._sockaddr = "\0" + address[1:] if address.startswith("@") else address
        self._watchdog_usec = watchdog_usec
        self._watchdog_pid = watchdog_pid
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self.errors = 0  # datagrams that could not be sent; a notifier never raises

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, unset_environment: bool = False
    ) -> SystemdNotifier | None:
        """The notifier NOTIFY_SOCKET names, or None outside systemd (or for an unusable one).

        With `unset_environment`, NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID leave
        `os.environ`, so no child process inherits them.
        """
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        usec_text = env.get("WATCHDOG_USEC", "")
        pid_text = env.get("WATCHDOG_PID", "")
        if unset_environment:
            for key in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
                os.environ.pop(key, None)
        # Only filesystem paths and abstract names; vsock: and others are not for a user unit.
        if not address or not (address.startswith("/") or address.startswith("@")):
            return None
        usec = int(usec_text) if usec_text.isdigit() and int(usec_text) > 0 else None
        pid = int(pid_text) if pid_text.isdigit() else None
        return cls(address, watchdog_usec=usec, watchdog_pid=pid)

    def watchdog_interval(self) -> float | None:
        """WatchdogSec in seconds when the watchdog is meant for this process; ping at half."""
        if self._watchdog_usec is None:
            return None
        if self._watchdog_pid is not None and self._watchdog_pid != os.getpid():
            return None
        return self._watchdog_usec / 1_000_000

    def send(self, *fields: str) -> bool:
        """Send one datagram of `KEY=VALUE` lines; False (never an exception) on failure."""
        data = "\n".join(fields).encode("utf-8")
        with self._lock:
            try:
                if self._sock is None:
                    self._sock = socket.socket(
                        socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC
                    )
                self._sock.sendto(data, self._sockaddr)
                return True
            except OSError:
                self.errors += 1
                if self._sock is not None:
                    self._sock.close()
                    self._sock = None  # a new socket next time: the manager may have restarted
                return False

    def ready(self, status: str | None = None) -> bool:
        """Startup (or a reload) is finished."""
        fields = ["READY=1"]
        if status:
            fields.append(f"STATUS={_one_line(status)}")
        return self.send(*fields)

    def status(self, text: str) -> bool:
        """A one-line status that `systemctl status` shows."""
        return self.send(f"STATUS={_one_line(text)}")

    def watchdog(self) -> bool:
        """Keep-alive; send only while the daemon is healthy."""
        return self.send("WATCHDOG=1")

    def stopping(self) -> bool:
        """Shutdown has begun."""
        return self.send("STOPPING=1")

    def reloading(self) -> bool:
        """A configuration reload has begun; send `ready()` when it is done."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def extend_timeout(self, seconds: float) -> bool:
        """Ask for more time to start or stop (EXTEND_TIMEOUT_USEC)."""
        return self.send(f"EXTEND_TIMEOUT_USEC={int(seconds * 1_000_000)}")

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200]


class Heartbeat:
    """Feeds the systemd watchdog from the daemon's loop, only while `healthy()` says so.

    Call `beat(time.monotonic())` on every turn of the loop: a wedged loop stops the pings
    by itself, and `healthy()` stops them when a watcher is dead or a run's worker wedged.
    """

    def __init__(
        self,
        notifier: SystemdNotifier | None,
        healthy: Callable[[], bool],
        interval: float | None = None,
    ) -> None:
        self.notifier = notifier
        self.healthy = healthy
        wd = notifier.watchdog_interval() if notifier else None
        self.interval = interval if interval is not None else (wd / 2 if wd else None)
        self._last: float | None = None
        self.unhealthy_since: float | None = None

    def beat(self, now: float) -> bool:
        """Send WATCHDOG=1 when one is due and the daemon is healthy; True when sent."""
        if self.notifier is None or not self.interval:
            return False
        if self._last is not None and now - self._last < self.interval:
            return False
        if not self.healthy():
            if self.unhealthy_since is None:
                self.unhealthy_since = now
            return False
        self.unhealthy_since = None
        self._last = now
        return self.notifier.watchdog()


# the unit ---------------------------------------------------------------------------

WATCHDOG_SEC = 30
STOP_TIMEOUT_SEC = 90  # longer than the default shutdown_grace (30s) plus loopd's own cleanup
UNIT_TEMPLATE = """\
# loopd user unit for the home {home}
# Written by `loopd systemd install`; edit the home's loopd.toml, not this file.
[Unit]
Description=loopd: coding agents on schedules and repository events ({name})
# Give up after five failed starts in ten minutes instead of looping forever.
StartLimitIntervalSec=600
StartLimitBurst=5

[Service]
Type=notify
NotifyAccess=main
ExecStart={exec_start}
ExecReload=/bin/kill -HUP $MAINPID
WorkingDirectory={home_q}
# Every variable the home names (api_key_env, secret_env, checks_env) goes here: KEY=value
# lines, chmod 600; `loopd check --env-file FILE` says which are missing. The file is optional.
EnvironmentFile=-{env_file}
{environment}WatchdogSec={watchdog}
Restart=on-failure
RestartSec=5
# Exit status 2 is a configuration error: restarting cannot fix it.
RestartPreventExitStatus=2
# SIGTERM to loopd alone: it stops its agents within shutdown_grace; SIGKILL to all after.
KillMode=mixed
# loopd gives each agent and check a control group of its own (max_processes, max_memory).
Delegate=pids memory
TimeoutStopSec={stop_timeout}
UMask=0077

[Install]
WantedBy=default.target
"""


def _exec_quote(arg: str) -> str:
    """One argument as an ExecStart= line takes it: specifiers and variables escaped."""
    text = arg.replace("\\", "\\\\").replace("%", "%%").replace("$", "$$")
    if re.search(r'[\s"\';]', text) or not text:
        text = '"' + text.replace('"', '\\"') + '"'
    return text


def _env_quote(key: str, value: str) -> str:
    text = f"{key}={value}".replace("\\", "\\\\").replace("%", "%%").replace('"', '\\"')
    return f'"{text}"'


def _path_value(path: str) -> str:
    # WorkingDirectory= and EnvironmentFile= take a path; only specifiers need escaping.
    return path.replace("%", "%%")


def render_unit(
    executable: str,
    home: Path,
    name: str,
    environment: Mapping[str, str] | None = None,
    env_file: str | None = None,
    stop_timeout: int = STOP_TIMEOUT_SEC,
) -> str:
    """The text of the user unit that runs `executable --home HOME run`."""
    home_text = str(home)
    env_lines = "".join(
        f"Environment={_env_quote(k, v)}\n" for k, v in sorted((environment or {}).items())
    )
    return UNIT_TEMPLATE.format(
        home=home_text.replace("\n", " "),
        name=name,
        exec_start=" ".join(_exec_quote(a) for a in (executable, "--home", home_text, "run")),
        home_q=_path_value(home_text),
        env_file=_path_value(env_file) if env_file else f"%h/.config/loopd/{name}.env",
        environment=env_lines,
        watchdog=WATCHDOG_SEC,
        stop_timeout=stop_timeout,
    )


def unit_name(home: Path) -> str:
    """`loopd-<home folder name>.service`, in the characters unit names allow."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", home.name).strip("-.") or "home"
    return f"loopd-{slug}.service"


def user_unit_dir(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_CONFIG_HOME/systemd/user`, else `~/.config/systemd/user`."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "systemd" / "user"


def user_bus_exists(environ: Mapping[str, str] | None = None) -> bool:
    """Whether a user service manager can be reached (`$XDG_RUNTIME_DIR/bus`)."""
    env = os.environ if environ is None else environ
    runtime = env.get("XDG_RUNTIME_DIR", "")
    return bool(runtime) and Path(runtime, "bus").exists()


def unit_home(text: str) -> str | None:
    """The `--home` an installed loopd unit names, to tell two homes' units apart."""
    for line in text.splitlines():
        if line.startswith("ExecStart="):
            match = re.search(r'--home\s+("(?:[^"\\]|\\.)*"|\S+)', line)
            if match:
                value = match.group(1)
                if value.startswith('"'):
                    value = value[1:-1].replace('\\"', '"')
                return value.replace("\\\\", "\\").replace("%%", "%").replace("$$", "$")
    return None


def example_unit() -> str:
    """`systemd/loopd.service`: the unit for a home at ~/loopd and loopd from pipx."""
    text = render_unit("/EXE", Path("/HOME"), "loopd")
    header, _, rest = text.partition("[Unit]")
    header = (
        "# loopd user unit, an example for a home at ~/loopd and loopd in ~/.local/bin.\n"
        "# `loopd systemd install` writes one for your home, with absolute paths and your PATH.\n"
    )
    rest = rest.replace("/EXE", "%h/.local/bin/loopd").replace("/HOME", "%h/loopd")
    rest = rest.replace("(loopd)", "(~/loopd)")
    return header + "[Unit]" + rest
