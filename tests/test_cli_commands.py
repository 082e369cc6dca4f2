"""`loopd COMMAND` imports only its command's module: main's table matches the modules."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from daemon.cli.main import COMMANDS, build_parser, cli_modules, command_of
from tests.helpers import ROOT


def added_by(module: str) -> set[str]:
    """The commands a daemon/cli module's `register` adds."""
    register = getattr(importlib.import_module(f"daemon.cli.{module}"), "register", None)
    if register is None:
        return set()
    sub = argparse.ArgumentParser().add_subparsers()
    register(sub)
    return set(sub.choices)


def test_the_table_names_each_command_of_each_module() -> None:
    """Each command's entry names the module whose `register` adds it, and no other."""
    added = {module: added_by(module) for module in cli_modules()}
    assert {c: m for m, commands in added.items() for c in commands} == COMMANDS


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["status"], "status"),
        (["--home", "h", "status", "--json"], "status"),
        (["--home=h", "logs", "RUN"], "logs"),
        (["--help"], None),
        (["--home", "h", "-h"], None),
        (["--version"], None),
        (["statu"], None),
        ([], None),
    ],
)
def test_the_command_is_found_past_the_global_options(argv: list[str], command: str | None) -> None:
    assert command_of(argv) == command


def test_a_command_parser_has_only_its_module_and_help_has_all() -> None:
    parser = build_parser("status")
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(sub.choices) == {"run", "status", "pause", "resume"}
    full = build_parser()
    (sub,) = [a for a in full._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(sub.choices) == set(COMMANDS)


def test_status_loads_no_other_command_module() -> None:
    """`loopd status --help` in a fresh interpreter: no other cli module, no daemon, no run."""
    code = (
        "import sys\n"
        "from daemon.cli.main import main\n"
        "try:\n"
        "    main(['status', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('daemon'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.splitlines()
    loaded = set(out[-1].split())
    cli = {m.removeprefix("daemon.cli.") for m in loaded if m.startswith("daemon.cli.")}
    assert cli - {"main", "common", "daemon", "runview", "statusview", "engine_views"} == set()
    assert not {"daemon.daemon", "daemon.runs.executor", "daemon.runs.finish"} & loaded
