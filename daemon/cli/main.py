"""`loopd`: the console script. It parses the command line with every command's parser
(`cli/parsers.py`, which imports no command), so `loopd --help` and `loopd COMMAND --help`
answer at once; a parsed command imports its own module alone (`cli/invoke.py`)."""

from __future__ import annotations

import argparse
import importlib
import sys

import daemon
from daemon.cli.parsers import register


def build_parser() -> argparse.ArgumentParser:
    """The parser with every command; no command's module is imported."""
    parser = argparse.ArgumentParser(
        prog="loopd",
        description="A daemon for loop engineering: runs coding agents, judges, learns.",
    )
    parser.add_argument("--version", action="version", version=f"loopd {daemon.__version__}")
    parser.add_argument("--home", help="the home folder (default: $LOOPD_HOME, else the cwd)")
    register(parser.add_subparsers(dest="command", metavar="COMMAND"))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    # Only now the command's needs: the configuration, the state, the command's module.
    return importlib.import_module("daemon.cli.invoke").invoke(args)


if __name__ == "__main__":
    sys.exit(main())
