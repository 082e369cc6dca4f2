"""`loopd web`: the console, pages and actions over the commands' own readers (daemon/web/)."""

from __future__ import annotations

import argparse
import ipaddress
import signal
import sys
from typing import Any

from daemon.cli.common import CommandError, home_of
from daemon.extras import install_command
from daemon.web.console import Console
from daemon.web.security import login_token, token_path

DEFAULT_BIND = "127.0.0.1:8790"


def _address(bind: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets), or a usage error saying what to write."""
    host, sep, port = bind.rpartition(":")
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
        number = int(port)
    except ValueError:
        number = -1
    if not sep or not 0 < number < 65536:
        raise CommandError(
            f"--bind {bind!r}: write an address and a port, e.g. --bind {DEFAULT_BIND} "
            "(or [::1]:8790)"
        )
    return host, number


def _url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def web(args: argparse.Namespace) -> int:
    """The console in a browser: loops, runs, escalations, rules; --url: its login address."""
    home = home_of(args)
    host, port = _address(args.bind)
    if args.url:
        print(f"{_url(host, port)}login?token={login_token(home.state_dir)}")
        return 0
    try:
        import starlette  # noqa: F401 - only to say which extra is missing
        import uvicorn
    except ModuleNotFoundError as exc:
        raise CommandError(
            f"`loopd web` needs the [web] extra ({exc.name} is not installed). Fix: "
            f"{install_command('web')}"
        ) from None
    token = login_token(home.state_dir)
    if not ipaddress.ip_address(host).is_loopback:
        print(
            f"loopd: warning: the console listens on {host}, beyond this machine: put it "
            "behind TLS (docs/console.md)",
            file=sys.stderr,
        )
    from daemon.web.app import build_app

    console = Console(home=str(home.root), token=token, read_only=args.read_only)
    app = build_app(console)
    print(
        f"loopd web: {_url(host, port)} for {home.root}"
        f"{' (read-only)' if args.read_only else ''}; log in with the address "
        f"`loopd web --url` prints (the token is in {token_path(home.state_dir)})",
        flush=True,
    )
    _serve(uvicorn, app, host, port, console)
    return 0


def _serve(uvicorn: Any, app: Any, host: str, port: int, console: Console) -> None:
    """uvicorn until SIGTERM or SIGINT, as the listener runs it: no access log, no headers
    of its own, X-Forwarded-For not believed."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        proxy_headers=False,
        forwarded_allow_ips="",
        loop="asyncio",
        lifespan="off",
        ws="none",
        interface="asgi3",
        access_log=False,
        log_level="warning",
        server_header=False,
        timeout_keep_alive=5,
    )
    server = uvicorn.Server(config)
    console.stopping = lambda: bool(server.should_exit)  # live logs end, so the stop is quick
    signal.signal(signal.SIGTERM, lambda *_: setattr(server, "should_exit", True))
    server.run()
