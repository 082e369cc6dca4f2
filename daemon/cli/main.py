"""`loopd`: the console script. Each `daemon/cli/*.py` module adds its command group."""

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
    "escalations": 5,
    "report": 6,
    "notify": 6,
    "redact": 6.5,
    "systemd": 7,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopd",
        description="A daemon for loop engineering: runs coding agents, judges, learns.",
    )
    parser.add_argument("--version", action="version", version=f"loopd {daemon.__version__}")
    parser.add_argument("--home", help="the home folder (default: $LOOPD_HOME, else the cwd)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = pkgutil.iter_modules(daemon.cli.__path__)
    for info in sorted(modules, key=lambda i: (GROUP_ORDER.get(i.name, 99), i.name)):
        if info.name in {"main", "common"} or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"daemon.cli.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    example.register()  # every command reads homes whose loops may run the embedded example
    parser = build_parser()
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
