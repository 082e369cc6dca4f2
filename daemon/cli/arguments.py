"""What every command's parser shares: `--home` and `--json` after the subcommand, and a
subcommand whose help is its function's docstring. Imports nothing of loopd (`--help`)."""

from __future__ import annotations

import argparse
from typing import Any


def add_home_and_json(parser: argparse.ArgumentParser, json_flag: bool = True) -> None:
    """Let `--home` (and `--json`) also be given after the subcommand."""
    parser.add_argument("--home", default=argparse.SUPPRESS, help="the home folder")
    if json_flag:
        parser.add_argument("--json", action="store_true", help="print JSON")


def command(
    sub: Any, name: str, func: str, doc: str, json_flag: bool = False
) -> argparse.ArgumentParser:
    """Add a subcommand run by `func` ("module:function"); `doc` is that function's docstring,
    whose first line is the subcommand's line in its group's help."""
    parser = sub.add_parser(name, help=doc.strip().splitlines()[0], description=doc)
    add_home_and_json(parser, json_flag)
    parser.set_defaults(func=func)
    return parser
