"""`loopd init` and `loopd check`: make a home, validate its configuration."""

from __future__ import annotations

import argparse
from pathlib import Path

from daemon.cli.common import CommandError, command, home_of, print_json


def init(args: argparse.Namespace) -> int:
    """Make a home with commented examples."""
    from daemon.home import init_home, is_home

    target = Path(args.dir or ".").expanduser().resolve()
    existing = is_home(target)
    written = init_home(target)
    for path in written:
        print(f"wrote {path}")
    if existing:
        print(f"{target} is a home already: its loopd.toml and loops/ are left as they are")
        return 0
    print(
        f"home ready at {target}: `loopd --home {target} run` runs the example once and "
        f"says what it did; then add your loops (loops/example.toml says how) and "
        f"`loopd --home {target} check`"
    )
    return 0


def check(args: argparse.Namespace) -> int:
    """Validate loopd.toml and loops/*.toml."""
    from daemon.cli.runs import daemon_pid
    from daemon.service.preflight import preflight_warnings

    home = home_of(args)
    loaded = home.load()
    if loaded.daemon_ok and loaded.daemon.engine.temporal:
        from daemon.engine.temporal.check import check_schedules

        errors, warnings = check_schedules(home, loaded)
        loaded.errors.extend(errors)
        loaded.warnings.extend(warnings)
    loaded.warnings.extend(preflight_warnings(loaded, home.config_path, daemon_pid(home)))
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
        print(
            f"{len(loaded.loops)} valid loop(s): {names}; {len(loaded.errors)} error(s), "
            f"{len(loaded.warnings)} warning(s)"
        )
    return 2 if loaded.errors else 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = command(sub, "init", init)
    parser.add_argument("dir", nargs="?", help="the folder to make a home in (default: .)")
    command(sub, "check", check, json_flag=True)


__all__ = ["register", "CommandError"]
