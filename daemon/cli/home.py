"""`loopd init` and `loopd check`: make a home, validate its configuration."""

from __future__ import annotations

import argparse
from pathlib import Path

from daemon.cli.common import CommandError, command, home_of, print_json


def init(args: argparse.Namespace) -> int:
    """Make a home with commented examples."""
    from daemon.home import init_home

    target = Path(args.dir or ".").expanduser().resolve()
    written = init_home(target)
    for path in written:
        print(f"wrote {path}")
    print(f"home ready at {target}; edit loops/*.toml, then `loopd --home {target} check`")
    return 0


def check(args: argparse.Namespace) -> int:
    """Validate loopd.toml and loops/*.toml."""
    from daemon.runs.budget import budget_warnings

    home = home_of(args)
    loaded = home.load()
    loaded.warnings.extend(budget_warnings(loaded))
    if args.json:
        print_json(
            {
                "home": str(home.root),
                "loops": sorted(loaded.loops),
                "errors": [
                    {"file": str(e.file), "key": e.key, "message": e.message, "fix": e.fix}
                    for e in loaded.errors
                ],
                "warnings": loaded.warnings,
            }
        )
    else:
        for error in loaded.errors:
            print(f"error: {error}")
        for warning in loaded.warnings:
            print(f"warning: {warning}")
        names = ", ".join(sorted(loaded.loops)) or "none"
        print(f"{len(loaded.loops)} valid loop(s): {names}; {len(loaded.errors)} error(s)")
    return 2 if loaded.errors else 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = command(sub, "init", init)
    parser.add_argument("dir", nargs="?", help="the folder to make a home in (default: .)")
    command(sub, "check", check, json_flag=True)


__all__ = ["register", "CommandError"]
