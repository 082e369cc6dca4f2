"""The notify protocol over a real AF_UNIX datagram socket, the heartbeat, and the unit."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.systemd import (
    Heartbeat,
    SystemdNotifier,
    example_unit,
    render_unit,
    unit_home,
)
from tests.helpers import ROOT, loopd, make_home, make_repo

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = tmp_path / "notify.sock"
    sock.bind(str(path))
    sock.settimeout(10)  # a bound on a broken test, not a timed assertion
    try:
        yield sock, str(path)
    finally:
        sock.close()


def received(sock: socket.socket) -> list[str]:
    return sock.recv(4096).decode().split("\n")


def test_ready_watchdog_stopping_over_a_real_socket(
    notify_socket: tuple[socket.socket, str],
) -> None:
    sock, path = notify_socket
    notifier = SystemdNotifier.from_env(
        {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}
    )
    assert notifier is not None
    assert notifier.watchdog_interval() == 30.0
    assert notifier.ready()
    assert received(sock) == ["READY=1"]
    assert notifier.status("2 loops,\n  1 running")
    assert received(sock) == ["STATUS=2 loops, 1 running"]
    assert notifier.watchdog()
    assert received(sock) == ["WATCHDOG=1"]
    assert notifier.reloading()
    reload_fields = received(sock)
    assert reload_fields[0] == "RELOADING=1"
    assert reload_fields[1].startswith("MONOTONIC_USEC=")
    assert int(reload_fields[1].split("=")[1]) > 0
    assert notifier.ready("reloaded")
    assert received(sock) == ["READY=1", "STATUS=reloaded"]
    assert notifier.stopping()
    assert received(sock) == ["STOPPING=1"]
    notifier.close()


def test_abstract_namespace_socket() -> None:
    name = f"loopd-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(10)
        notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": "@" + name})
        assert notifier is not None and notifier.ready()
        assert received(sock) == ["READY=1"]


def test_outside_systemd_and_unusable_sockets(tmp_path: Path) -> None:
    assert SystemdNotifier.from_env({}) is None
    assert SystemdNotifier.from_env({"NOTIFY_SOCKET": "vsock:2:1234"}) is None
    notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    assert notifier is not None
    assert notifier.ready() is False and notifier.errors == 1  # never raises
    assert notifier.watchdog_interval() is None


def test_watchdog_meant_for_another_process_is_not_ours() -> None:
    env = {"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}
    notifier = SystemdNotifier.from_env(env)
    assert notifier is not None and notifier.watchdog_interval() is None


def test_from_env_can_take_the_variables_out_of_the_environment(
    monkeypatch: pytest.MonkeyPatch, notify_socket: tuple[socket.socket, str]
) -> None:
    sock, path = notify_socket
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    monkeypatch.setenv("WATCHDOG_USEC", "20000000")
    notifier = SystemdNotifier.from_env(unset_environment=True)
    assert "NOTIFY_SOCKET" not in os.environ and "WATCHDOG_USEC" not in os.environ
    assert notifier is not None and notifier.watchdog_interval() == 20.0
    assert notifier.watchdog() and received(sock) == ["WATCHDOG=1"]


def test_heartbeat_pings_only_while_healthy(notify_socket: tuple[socket.socket, str]) -> None:
    sock, path = notify_socket
    sock.setblocking(False)
    notifier = SystemdNotifier(path, watchdog_usec=10_000_000)
    # The daemon's own check (watchers alive, no run's worker wedged), as run_daemon wires it.
    healthy = [True]
    beat = Heartbeat(notifier, healthy=lambda: healthy[0])

    now = 100.0
    assert beat.interval == 5.0
    assert beat.beat(now) is True
    assert beat.beat(now + 1) is False  # not due yet
    assert beat.beat(now + 5) is True
    now = 110.0
    healthy[0] = False  # a worker wedged
    assert beat.beat(now) is False and beat.unhealthy_since == now
    assert beat.beat(now + 1) is False and beat.unhealthy_since == now
    healthy[0] = True  # its run ended
    assert beat.beat(now + 2) is True and beat.unhealthy_since is None
    pings = []
    while True:
        try:
            pings.append(sock.recv(100))
        except BlockingIOError:
            break
    assert pings == [b"WATCHDOG=1"] * 3


def test_heartbeat_without_systemd_does_nothing() -> None:
    assert Heartbeat(None, healthy=lambda: True).beat(1.0) is False


def test_the_shipped_unit_is_the_generated_example() -> None:
    shipped = (ROOT / "systemd" / "loopd.service").read_text()
    assert shipped == example_unit()
    for line in (
        "Type=notify",
        "NotifyAccess=main",
        "WatchdogSec=30",
        "Restart=on-failure",
        "RestartPreventExitStatus=2",
        "KillMode=mixed",
        "Delegate=pids memory",
        "TimeoutStopSec=90",
        "ExecStart=%h/.local/bin/loopd --home %h/loopd run",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "WantedBy=default.target",
    ):
        assert line in shipped.splitlines()


def test_unit_quoting_round_trips_the_home(tmp_path: Path) -> None:
    home = tmp_path / "my home 100%"
    text = render_unit("/usr/bin/loopd", home, "loopd-x", environment={"PATH": "/a b:/c%"})
    assert 'ExecStart=/usr/bin/loopd --home "' in text and "100%%" in text
    assert 'Environment="PATH=/a b:/c%%"' in text
    assert unit_home(text) == str(home)


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_accepts_the_units(tmp_path: Path) -> None:
    loopd_bin = shutil.which("loopd") or "/bin/true"
    shipped = (ROOT / "systemd" / "loopd.service").read_text()
    # verify checks that ExecStart's program exists; point it at one that does
    (tmp_path / "loopd.service").write_text(shipped.replace("%h/.local/bin/loopd", loopd_bin))
    home = make_home(tmp_path / "home")
    (tmp_path / "loopd-home.service").write_text(
        render_unit(loopd_bin, home, "loopd-home", environment={"PATH": os.environ["PATH"]})
    )
    for name in ("loopd.service", "loopd-home.service"):
        proc = subprocess.run(
            [SYSTEMD_ANALYZE, "verify", str(tmp_path / name)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        assert "Unknown key" not in proc.stderr and "Invalid" not in proc.stderr, proc.stderr


def test_systemd_install_writes_the_unit_and_prints_the_commands(tmp_path: Path) -> None:
    home = make_home(tmp_path / "work" / "nightly", '[limits]\nshutdown_grace = "2m"\n')
    env = {
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_RUNTIME_DIR": str(tmp_path / "runtime"),  # no bus there
        "USER": "dev",
    }
    proc = loopd(home, "systemd", "install", env=env)
    assert proc.returncode == 0, proc.stderr
    unit = tmp_path / "config" / "systemd" / "user" / "loopd-nightly.service"
    text = unit.read_text()
    assert f"--home {home} run" in text
    assert text.split("ExecStart=", 1)[1].split(" ", 1)[0].startswith("/")
    assert "TimeoutStopSec=180" in text  # longer than this home's shutdown_grace
    assert 'Environment="PATH=' in text
    assert "systemctl --user daemon-reload" in proc.stdout
    assert "systemctl --user enable --now loopd-nightly.service" in proc.stdout
    assert "loginctl enable-linger dev" in proc.stdout

    # again for the same home: fine; for another home of the same name: refused, --name helps
    assert loopd(home, "systemd", "install", env=env).returncode == 0
    other = make_home(tmp_path / "elsewhere" / "nightly")
    clash = loopd(other, "systemd", "install", env=env)
    assert clash.returncode == 2 and "--name" in clash.stderr
    named = loopd(other, "systemd", "install", "--name", "loopd-other", env=env)
    assert named.returncode == 0, named.stderr
    assert (unit.parent / "loopd-other.service").is_file()

    printed = loopd(home, "systemd", "install", "--print", env=env)
    assert printed.stdout.startswith(f"# loopd user unit for the home {home}")


def test_systemd_install_lists_every_named_variable_and_check_finds_the_missing(
    tmp_path: Path,
) -> None:
    """Keys, webhook secrets and variables passed to checks: under systemd loopd sees only the
    unit's environment file, so install names each one and `check --env-file` warns per gap."""
    repo = make_repo(tmp_path / "repo")
    config = (
        '[agents.claude]\nadapter = "claude"\napi_key_env = "ANTHROPIC_KEY_FOR_LOOPD"\n'
        '[remotes.gh]\nkind = "github"\nrepository = "me/app"\n'
        'clone_url = "https://example.invalid/me/app.git"\nsecret_env = "LOOPD_GH_SECRET"\n'
    )
    loops = {
        "nightly": f'repo = "{repo}"\ntask = "t"\nagent = "claude"\nchecks_env = ["DATABASE_URL"]\n'
    }
    home = make_home(tmp_path / "home", config, loops)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_RUNTIME_DIR": str(tmp_path / "r")}
    proc = loopd(home, "systemd", "install", "--no-enable", env=env)
    assert proc.returncode == 0, proc.stderr
    for name, where in (
        ("ANTHROPIC_KEY_FOR_LOOPD", "[agents.claude] api_key_env"),
        ("LOOPD_GH_SECRET", "[remotes.gh] secret_env"),
        ("DATABASE_URL", "loops/nightly.toml checks_env"),
    ):
        assert any(name in line and where in line for line in proc.stdout.splitlines()), name
    assert "check --env-file" in proc.stdout

    env_file = tmp_path / "loopd-home.env"
    env_file.write_text("# the service's keys\nANTHROPIC_KEY_FOR_LOOPD=sk-test\n")
    checked = loopd(home, "check", "--env-file", str(env_file))
    said = checked.stdout + checked.stderr
    assert "LOOPD_GH_SECRET (named by loopd.toml [remotes.gh] secret_env)" in said, said
    assert "DATABASE_URL (named by loops/nightly.toml checks_env)" in said
    assert "ANTHROPIC_KEY_FOR_LOOPD (named" not in said
    assert "sk-test" not in said  # values are never read out
    missing = loopd(home, "check", "--env-file", str(tmp_path / "absent.env"))
    assert "no such environment file" in missing.stdout + missing.stderr
