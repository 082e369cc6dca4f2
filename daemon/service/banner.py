"""The start banner of `loopd run`: the home, its pid, the enabled loops, where `[listen]`
listens, how to stop it; then the sandbox and the configuration's errors, warnings, notes."""

from __future__ import annotations

import os
import sys
from typing import Any

import daemon as package
from daemon.config import Loop
from daemon.home import Home
from daemon.sandbox.registry import choose
from daemon.service.context import Context


def announce(home: Home, ctx: Context, loops: dict[str, Loop], listener: Any) -> None:
    """Print the banner (stdout) and what the person should know of the start (stderr)."""
    enabled = sorted(n for n, loop in loops.items() if loop.config.enabled)
    print(
        f"loopd {package.__version__} running for {home.root} (pid {os.getpid()}): "
        f"{len(enabled)} enabled loop(s){': ' + ', '.join(enabled) if enabled else ''}; "
        f"{listening(listener)}; Ctrl-C or SIGTERM stops it",
        flush=True,
    )
    sandbox = choose(ctx.config.daemon.sandbox)
    loud = sandbox.warning or sandbox.refusal
    print(f"loopd: {'warning: ' if loud else ''}{sandbox.summary()}", file=sys.stderr, flush=True)
    for error in ctx.config.errors:
        print(f"loopd: loop disabled: {error}", file=sys.stderr, flush=True)
    for warning in ctx.config.warnings:
        print(f"loopd: warning: {warning}", file=sys.stderr, flush=True)
    for note in ctx.config.notes:
        print(f"loopd: {note}", file=sys.stderr, flush=True)


def listening(listener: Any) -> str:
    """Where `[listen]` listens (the port it bound, when the file says 0), or that it is off
    (`listener`: daemon/service/listener.py's Listener, or None)."""
    if listener is None:
        return "[listen] off"
    host = listener.config.host
    host = f"[{host}]" if ":" in host else host
    return f"[listen] on http://{host}:{listener.port}"
