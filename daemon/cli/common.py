"""What every command group shares: the home, errors, JSON and rich output."""

from __future__ import annotations

import argparse
from typing import Any

from daemon.config import LoadedConfig, Loop
from daemon.engine import engine_for
from daemon.home import Home, resolve_home
from daemon.homepath import HomeNotFound
from daemon.state.lock import HomeLock
from daemon.state.store import StateStore


class CommandError(Exception):
    """A command failed in a way the user must fix; exit code 2 unless said otherwise."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def home_of(args: argparse.Namespace) -> Home:
    try:
        return resolve_home(getattr(args, "home", None))
    except HomeNotFound as exc:
        raise CommandError(str(exc)) from None


def valid_loop(home: Home, loaded: LoadedConfig, name: str) -> Loop:
    """The named loop, or a usage error that says what is wrong with it."""
    if name in loaded.loops:
        return loaded.loops[name]
    path = home.loops_dir / f"{name}.toml"
    problems = [str(e) for e in [*loaded.errors, *loaded.disabled_errors] if e.file == path]
    if problems:
        raise CommandError(
            f"loop {name!r} is broken:\n  "
            + "\n  ".join(problems)
            + "\nFix the file as each error says; a running daemon loads it once it is valid."
        )
    known = ", ".join(sorted(loaded.loops)) or "none"
    raise CommandError(f"unknown loop {name!r} (no {path}); known loops: {known}")


def daemon_pid(home: Home) -> int | None:
    """The pid of the daemon running for this home, or None."""
    lock = HomeLock(home.state_dir / "loopd.lock")
    return (lock.holder() or -1) if lock.is_held() else None


def engine_control(home: Home, loaded: Any = None) -> Any:
    """Where the commands act: None for the home's own state/ (the local engine), else the
    engine's view (daemon.engine.temporal.control.EngineControl)."""
    if _local_daemon_runs(home):
        return None  # an [engine] change waits for its restart; until then, its state/
    return engine_for(home, loaded).control()


def _local_daemon_runs(home: Home) -> bool:
    """Whether the local engine's daemon holds the home now (it wrote status.toml)."""
    lock = HomeLock(home.state_dir / "loopd.lock")
    if not lock.is_held():
        return False
    status = StateStore(home.state_dir).load_status().daemon
    return status.engine == "local" and status.pid == lock.holder()


def console():  # noqa: ANN201 - rich Console, imported lazily
    from rich.console import Console

    return Console()


def tested_home(args: Any, command_line: str, what: str) -> tuple[Any, Any]:
    """The home and its loaded configuration for a `--test` command (`loopd notify --test`):
    a usage error without --test, loopd.toml's own errors when it does not load."""
    if not args.test:
        raise CommandError(f"`{command_line}` {what}")
    home = home_of(args)
    loaded = home.load()
    if not loaded.daemon_ok:
        raise CommandError("\n".join(str(e) for e in loaded.errors if e.file == home.config_path))
    return home, loaded
