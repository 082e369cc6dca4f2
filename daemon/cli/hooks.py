"""`loopd hooks install [LOOP] [--uninstall]`: git hooks that trigger on_push loops."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from daemon.cli.common import CommandError, console, home_of
from daemon.cli.jsonout import print_json
from daemon.scheduling.hooks import (
    HookError,
    hooks_dir,
    inside_work_tree,
    install_hooks,
    uninstall_hooks,
)


def install_cmd(args: argparse.Namespace) -> int:
    """Install git hooks for loops with on_push (or remove them with --uninstall)."""
    home = home_of(args)
    loaded = home.load()
    if args.loop and args.loop not in loaded.loops:
        broken = [str(e) for e in loaded.errors if Path(e.file).stem == args.loop]
        detail = f": {broken[0]}" if broken else ""
        raise CommandError(f"unknown loop {args.loop!r}{detail}. Fix: see `loopd check`")
    chosen = [loaded.loops[args.loop]] if args.loop else list(loaded.loops.values())
    if not args.uninstall:
        if args.loop and not chosen[0].config.on_push:
            raise CommandError(
                f'loop {args.loop!r} has no on_push; add on_push = ["main"] to '
                f"{chosen[0].path} and run this again"
            )
        chosen = [loop for loop in chosen if loop.config.on_push]

    by_repo: dict[Path, dict[str, list[str]]] = {}
    for loop in chosen:
        by_repo.setdefault(loop.config.repo_path, {})[loop.name] = list(loop.config.on_push)

    report: list[dict[str, Any]] = []
    notes: list[str] = []
    for repo, loops in sorted(by_repo.items()):
        try:
            folder = hooks_dir(repo)
            if args.uninstall:
                changed = uninstall_hooks(home.root, repo, None if not args.loop else list(loops))
            else:
                changed = install_hooks(home.root, repo, loops, replace=not args.loop)
        except (HookError, OSError) as exc:
            raise CommandError(f"{repo}: {exc}") from None
        if not args.uninstall and inside_work_tree(repo, folder):
            notes.append(
                f"{repo}: core.hooksPath puts the hooks in {folder}, inside the work tree; "
                "loopd's wrappers there show up in `git status`"
            )
        report.append(
            {
                "repo": str(repo),
                "hooks": str(folder),
                "loops": sorted(loops),
                "changed": [str(p) for p in changed],
            }
        )

    if getattr(args, "json", False):
        print_json({"uninstall": args.uninstall, "repos": report, "notes": notes})
        return 0
    _print_report(args.uninstall, report, notes)
    return 0


def _print_report(uninstall: bool, report: list[dict[str, Any]], notes: list[str]) -> None:
    """What was installed (or removed) where, and the notes, for a person."""
    out = console()
    if not report:
        out.print("No loop has on_push; nothing to do." if not uninstall else "No loops.")
    for item in report:
        verb = "removed from" if uninstall else "installed in"
        state = f"{len(item['changed'])} files changed" if item["changed"] else "already so"
        out.print(
            f"hooks {verb} {item['hooks']} for {', '.join(item['loops'])} ({state})",
            highlight=False,
            markup=False,
        )
    for note in notes:
        out.print(f"note: {note}", highlight=False, markup=False)
