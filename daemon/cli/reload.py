"""`loopd reload`: the running daemon reads loopd.toml and loops/ again, now."""

from __future__ import annotations

import argparse
import os
import signal
import time

from daemon.cli.common import CommandError, daemon_pid, home_of
from daemon.cli.jsonout import print_json
from daemon.state.events import EventTail
from daemon.state.eventtypes import Event

WAIT = 30.0  # seconds for the daemon's answer


def reload(args: argparse.Namespace) -> int:
    """Make the running daemon read loopd.toml and loops/ again and say what it loaded."""
    home = home_of(args)
    store = home.state()
    pid = daemon_pid(home)
    if pid is None:
        raise CommandError(
            f"no daemon runs for {home.root}; `loopd check` validates the files, and "
            f"`loopd --home {home.root} run` starts the daemon with them"
        )
    tail = EventTail(store.events.path)
    token = store.request_reload()
    try:
        os.kill(pid, signal.SIGHUP)
    except ProcessLookupError:
        raise CommandError(f"the daemon (pid {pid}) is gone") from None
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        for event in tail.read():
            if event.get("type") in (Event.RELOADED, Event.RELOAD_FAILED) and token in (
                event.get("requests") or []
            ):
                return _answer(args, event)
        time.sleep(0.1)
    raise CommandError(f"the daemon (pid {pid}) did not answer within {WAIT:g}s", code=1)


def _answer(args: argparse.Namespace, event: dict) -> int:
    """Print what the daemon loaded; 0 when every file loaded, 1 otherwise."""
    if args.json:
        print_json(event)
    elif event["type"] == Event.RELOAD_FAILED:
        print(f"reload failed; the daemon keeps the configuration it had:\n{event.get('error')}")
    else:
        loops = event.get("loops") or []
        print(f"reloaded: {len(loops)} loop(s): {', '.join(loops) or 'none'}")
        if event.get("changed"):
            print(f"  changed: {', '.join(event['changed'])}")
        for name in event.get("stale") or []:
            print(f"  {name}: its file does not load; the last good configuration is kept")
        for name in event.get("not_loaded") or []:
            print(f"  {name}: its file does not load; not loaded")
        for line in event.get("restart") or []:
            print(f"  {line}")
        if event.get("stale") or event.get("not_loaded"):
            print("  `loopd check` names each error and its fix")
    ok = event["type"] == Event.RELOADED and not event.get("stale") and not event.get("not_loaded")
    return 0 if ok else 1
