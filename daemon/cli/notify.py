"""`loopd notify --test`: send a test notification through `[notify]` and say what happened."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path
from typing import Any

from daemon.cli.common import CommandError, tested_home
from daemon.cli.jsonout import print_json
from daemon.clock import utc_now
from daemon.config import NotifyConfig
from daemon.people.notify import NotifyError, notifiers_from_config
from daemon.retry import RetryPolicy
from daemon.state.events import iso
from daemon.state.eventtypes import Event


def notify_cmd(args: argparse.Namespace) -> int:
    """Send a test notification through [notify] (--test) and say what happened."""
    home, loaded = tested_home(
        args, "loopd notify --test", "sends a test notification through [notify]"
    )
    config = loaded.daemon.notify
    notifiers = _notifiers(config, home.config_path)
    if not notifiers:
        raise CommandError(
            f"{home.config_path}: [notify] has no command, webhook, urls or plugins, so "
            'escalations reach nobody. Fix: add command = ["notify-send", "loopd"], webhook = '
            '"https://..." or urls = ["ntfy://ntfy.sh/TOPIC"] under [notify]'
        )
    now = utc_now()
    message = (
        f"loopd test notification from {socket.gethostname()} for {home.root} at "
        f"{iso(now)[:16]}Z: escalations will reach you this way."
    )
    payload = {"kind": "test", "home": str(home.root), "ts": iso(now)}
    store = home.state(loaded.daemon.limits.events_rotate)
    results = []
    for notifier in notifiers:
        where = _where(notifier, config)
        try:
            notifier.send(message, payload)
        except NotifyError as exc:
            results.append(
                {"notifier": notifier.name, "where": where, "ok": False, "error": str(exc)}
            )
            store.events.append(
                Event.NOTIFY_FAILED, utc_now(), kind="test", notifier=notifier.name, error=str(exc)
            )
        else:
            results.append({"notifier": notifier.name, "where": where, "ok": True, "error": ""})
            store.events.append(Event.NOTIFIED, utc_now(), kind="test", notifier=notifier.name)
    if args.json:
        print_json({"message": message, "results": results})
    else:
        for r in results:
            if r["ok"]:
                print(f"{r['where']}: delivered (it accepted the message; check that it arrived)")
            else:
                print(f"{r['where']}: FAILED: {r['error']}")
        print(f"message: {message}")
    return 0 if all(r["ok"] for r in results) else 1


def _notifiers(config: NotifyConfig, path: Path) -> list[Any]:
    """The notifiers of `[notify]` for a test: a webhook tried once (a test says at once
    whether it answers); exit 2 for one that cannot be made."""
    try:
        return notifiers_from_config(config, retry=RetryPolicy(tries=1))
    except NotifyError as exc:
        raise CommandError(f"{path}: {exc}", code=2) from None


def _where(notifier: Any, config: NotifyConfig) -> str:
    """Where a notifier sends, as the test's answer names it (no token of a URL)."""
    if notifier.name == "command":
        return f"command {config.command[0]!r}"
    if notifier.name == "apprise":
        return f"apprise {notifier.where}"
    if notifier.name in config.plugins:
        return f"plugin {notifier.name!r}"
    return f"webhook {config.webhook.split('/')[2] if '//' in config.webhook else ''}"
