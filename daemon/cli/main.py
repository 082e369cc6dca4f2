"""`loopd`: the console script. It parses the command line with every command's parser
(`cli/parsers.py`, which imports no command), so `loopd --help` and `loopd COMMAND --help`
answer at once; a parsed command imports its own module alone (`cli/invoke.py`)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

import daemon
from daemon.cli.parsers import register


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser with every command (`only`: with that command alone, when it is one); no
    command's module is imported."""
    parser = argparse.ArgumentParser(
        prog="loopd",
        description="A daemon for loop engineering: runs coding agents, judges, learns.",
    )
    parser.add_argument("--version", action="version", version=f"loopd {daemon.__version__}")
    parser.add_argument("--home", help="the home folder (default: $LOOPD_HOME, else the cwd)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    if only is None:
        register(sub)
        return parser
    chosen = _OneCommand(sub, only)
    register(chosen)
    # Not a command: the whole parser, whose error lists the commands there are.
    return parser if chosen.found else build_parser()


class _OneCommand:
    """The subparsers as `register` sees them, keeping one command: building the other forty
    parsers costs a command line more than the command itself does."""

    def __init__(self, sub: Any, name: str) -> None:
        self.sub, self.name, self.found = sub, name, False

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        if name != self.name:
            return _Ignored()
        self.found = True
        return self.sub.add_parser(name, **kwargs)


class _Ignored:
    """A parser of another command: everything said to it is dropped."""

    def __getattr__(self, _name: str) -> Any:
        return lambda *args, **kwargs: self


def command_word(argv: list[str]) -> str | None:
    """The command named on the line: its first word that is neither an option nor the
    value of `--home`."""
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word == "--home":
            skip = True
        elif not word.startswith("-"):
            return word
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(command_word(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    code = _plain_path(args)
    if code is not None:
        return code
    # Only now the command's needs: the configuration, the state, the command's module.
    return importlib.import_module("daemon.cli.invoke").invoke(args)


def _plain_path(args: argparse.Namespace) -> int | None:
    """The command answered from plain reads of the home (daemon/plain/), when it has such a
    path and it can be sure; None: the full path answers. A plain path that fails falls back
    to the full one, which says what is wrong. `LOOPD_READ_PATH=models`: always the full path;
    `only`: the plain path or exit 3, its failures shown (how tests compare the two)."""
    fast = getattr(args, "plain", None)
    mode = os.environ.get("LOOPD_READ_PATH", "plain")
    if not fast or mode == "models":
        return None
    module, name = fast.split(":")
    function: Any = getattr(importlib.import_module(f"daemon.cli.{module}"), name)
    if mode == "only":
        code = function(args)
        if code is None:
            print("loopd: LOOPD_READ_PATH=only: the plain path did not answer", file=sys.stderr)
            return 3
        return code
    try:
        return function(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`loopd runs | head`): nothing to say, as the full path does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception:  # noqa: BLE001 - the full path answers, and says what is wrong
        return None


if __name__ == "__main__":
    sys.exit(main())
