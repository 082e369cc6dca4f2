"""`loopd`: the console script. Each `daemon/cli/*.py` module adds its command group; a
command imports only its own module (COMMANDS), and `loopd --help` imports them all."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

import daemon
import daemon.cli
from daemon import example
from daemon.cli.common import CommandError
from daemon.engine.base import EngineError

# The order `loopd --help` lists the command groups in: a new user's path through them.
GROUP_ORDER = {
    "home": 0,
    "runs": 1,
    "show": 1,
    "logs": 1.5,
    "branches": 1.7,
    "daemon": 2,
    "worker": 2,
    "reload": 2,
    "hooks": 3,
    "rules": 4,
    "experiment": 4.5,  # replay and experiment (daemon/cli/experiment.py), after the rules
    "calibrate": 4.6,  # measures the judge, after the experiments
    "escalations": 5,
    "report": 6,
    "notify": 6,
    "redact": 6.5,
    "systemd": 7,
}

# Each command's module under daemon/cli/. The modules import at top what their commands need,
# so `loopd status` loads daemon.py's needs alone; tests/test_cli_commands.py checks that this
# matches what each module's `register` adds.
COMMANDS = {
    "init": "home",
    "check": "home",
    "once": "runs",
    "trigger": "runs",
    "cancel": "runs",
    "runs": "show",
    "show": "show",
    "logs": "logs",
    "branches": "branches",
    "land": "land",
    "run": "daemon",
    "status": "daemon",
    "pause": "daemon",
    "resume": "daemon",
    "worker": "worker",
    "reload": "reload",
    "hooks": "hooks",
    "rules": "rules",
    "replay": "experiment",
    "experiment": "experiment",
    "calibrate": "calibrate",
    "escalations": "escalations",
    "report": "report",
    "notify": "notify",
    "verifier": "verifier",
    "redact": "redact",
    "systemd": "systemd",
    "docs": "docs",
    "mcp": "mcp",
}


def command_of(argv: list[str]) -> str | None:
    """The command an argument list names, or None when it asks for the whole help (or for no
    command, or for one loopd does not know, so argparse says which there are)."""
    rest = iter(argv)
    for arg in rest:
        if arg == "--home":
            next(rest, None)
        elif arg.startswith("--home="):
            continue
        elif arg.startswith("-"):
            return None  # -h, --help, --version, or a mistake: the whole parser answers
        else:
            return arg if arg in COMMANDS else None
    return None


def cli_modules() -> list[str]:
    """The names of the command modules of daemon/cli/, in `loopd --help`'s order."""
    modules = pkgutil.iter_modules(daemon.cli.__path__)
    return [
        info.name
        for info in sorted(modules, key=lambda i: (GROUP_ORDER.get(i.name, 99), i.name))
        if info.name not in {"main", "common"} and not info.name.startswith("_")
    ]


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with every command, or with only `command`'s module (a known command)."""
    parser = argparse.ArgumentParser(
        prog="loopd",
        description="A daemon for loop engineering: runs coding agents, judges, learns.",
    )
    parser.add_argument("--version", action="version", version=f"loopd {daemon.__version__}")
    parser.add_argument("--home", help="the home folder (default: $LOOPD_HOME, else the cwd)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    names = [COMMANDS[command]] if command in COMMANDS else cli_modules()
    for name in names:
        module = importlib.import_module(f"daemon.cli.{name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    example.register()  # every command reads homes whose loops may run the embedded example
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(command_of(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2

    try:
        code = int(args.func(args) or 0)
    except (CommandError, EngineError) as exc:
        print(f"loopd: {exc}", file=sys.stderr)
        code = getattr(exc, "code", 2)
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        # The reader went away (`loopd logs RUN | head`): nothing is wrong, nothing to say.
        # stdout is pointed at /dev/null so the interpreter's own flush at exit stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    return _leave(code)


def _leave(code: int) -> int:
    """A process that talked to the Temporal engine ends at once (its SDK can crash an
    ordinary interpreter exit); any other returns `code`."""
    connect = sys.modules.get("daemon.engine.temporal.connect")
    return connect.leave(code) if connect is not None else code


if __name__ == "__main__":
    sys.exit(main())
