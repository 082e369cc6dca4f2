"""`loopd systemd install`: the user unit for this home."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from daemon.cli.common import CommandError, home_of
from daemon.config import LoadedConfig
from daemon.config.secrets import named_variables
from daemon.systemd import (
    STOP_TIMEOUT_SEC,
    render_unit,
    unit_home,
    unit_name,
    user_bus_exists,
    user_unit_dir,
)


def loopd_executable() -> str:
    """The absolute path of the `loopd` script of this installation."""
    beside = Path(sys.executable).parent / "loopd"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("loopd")
    if found:
        return str(Path(found).resolve())
    raise CommandError(
        "cannot find the `loopd` executable (not beside "
        f"{sys.executable} and not on PATH). Fix: install loopd with pip or pipx"
    )


def _write_unit(path: Path, text: str) -> None:
    # Not write_atomic: that would make ~/.config/systemd/user 0700, which is the user's folder.
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def install_cmd(args: argparse.Namespace) -> int:
    """Write the user unit for this home; enable it where a user bus exists; hint at linger."""
    home = home_of(args).root
    name = args.name or unit_name(home)
    if not name.endswith(".service"):
        name += ".service"
    stem = name.removesuffix(".service")
    environment = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")}
    if os.environ.get("LANG"):
        environment["LANG"] = os.environ["LANG"]
    # systemd must wait for loopd's own shutdown: the grace for attempts, then cleanup.
    loaded = home_of(args).load()
    grace = loaded.daemon.limits.shutdown_grace.total_seconds()
    stop_timeout = max(STOP_TIMEOUT_SEC, int(grace) + 60)
    text = render_unit(
        loopd_executable(), home, stem, environment=environment, stop_timeout=stop_timeout
    )
    if args.print_only:
        sys.stdout.write(text)
        return 0
    path = user_unit_dir() / name
    if path.exists():
        other = unit_home(path.read_text(errors="replace"))
        if other is not None and Path(other) != home:
            raise CommandError(
                f"{path} already runs loopd for another home ({other}). Fix: pass "
                "--name NAME to install this home's unit under another name"
            )
    _write_unit(path, text)
    print(f"wrote {path}")
    commands = [
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", "--now", name],
    ]
    code = 0
    if args.no_enable or not user_bus_exists() or shutil.which("systemctl") is None:
        why = "as asked" if args.no_enable else "no user bus ($XDG_RUNTIME_DIR/bus) here"
        print(f"not enabled ({why}); to start it, run:")
        for argv in commands:
            print("  " + " ".join(argv))
    else:
        for argv in commands:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            if proc.returncode != 0:
                print(f"`{' '.join(argv)}` failed: {proc.stderr.strip()}", file=sys.stderr)
                print("run it yourself once the problem is fixed:", file=sys.stderr)
                for rest in commands[commands.index(argv) :]:
                    print("  " + " ".join(rest), file=sys.stderr)
                code = 1
                break
        else:
            print(f"enabled and started {name}")
    print(f"status: systemctl --user status {name}; logs: journalctl --user -u {name} -f")
    print(
        "to keep it running while you are logged out and start it at boot: "
        f"loginctl enable-linger {os.environ.get('USER') or '$USER'}"
    )
    _print_env_file_needs(loaded, home, stem)
    return code


def _print_env_file_needs(loaded: LoadedConfig, home: Path, stem: str) -> None:
    """Every variable the home names, which the service sees only from its environment file."""
    env_file = f"~/.config/loopd/{stem}.env"
    named = named_variables(loaded)
    if not named:
        print(f"environment: the home names no key; variables for it go in {env_file}")
        return
    print(
        "the service sees only its own environment: put these in "
        f"{env_file} (KEY=value lines, chmod 600):"
    )
    for item in named:
        print(f"  {item.name}  (named by {item.where})")
    print(f"then check it: loopd --home {home} check --env-file {env_file}")
