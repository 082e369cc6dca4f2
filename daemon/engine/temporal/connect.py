"""The connection to the engine: address, namespace, TLS client certificate or API key.

A process that opened a Temporal client ends through `os._exit` (see `leave`): the SDK's
native threads can crash the interpreter's normal shutdown of a short-lived process.
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from daemon.config import EngineConfig
from daemon.engine.base import EngineError

if TYPE_CHECKING:
    from temporalio.client import Client

RPC_TIMEOUT = timedelta(seconds=3)  # a query or describe that needs no long wait
CONNECT_TIMEOUT = 10.0

connected = False  # set once this process opened a client: it must leave through `leave`


def _read(home: Path, name: str, key: str) -> bytes:
    path = Path(os.path.expanduser(name))
    path = path if path.is_absolute() else home / path
    try:
        return path.read_bytes()
    except OSError as exc:
        raise EngineError(
            f"{home / 'loopd.toml'}: engine.{key}: cannot read {path}: {exc.strerror}. "
            "Fix: put the file there, or correct the path (relative to the home)"
        ) from None


def connect_options(engine: EngineConfig, home: Path) -> dict:
    """The keyword arguments of `Client.connect` that authenticate loopd."""
    from temporalio.service import TLSConfig

    options: dict = {}
    if engine.tls_cert or engine.tls_key or engine.tls_ca:
        if bool(engine.tls_cert) != bool(engine.tls_key):
            raise EngineError(
                f"{home / 'loopd.toml'}: [engine]: tls_cert and tls_key go together. "
                "Fix: set both (the client certificate and its key, PEM files)"
            )
        options["tls"] = TLSConfig(
            client_cert=_read(home, engine.tls_cert, "tls_cert") if engine.tls_cert else None,
            client_private_key=_read(home, engine.tls_key, "tls_key") if engine.tls_key else None,
            server_root_ca_cert=_read(home, engine.tls_ca, "tls_ca") if engine.tls_ca else None,
        )
    if engine.api_key_file:
        key = _read(home, engine.api_key_file, "api_key_file").decode("utf-8", "replace").strip()
        options["api_key"] = key
        options.setdefault("tls", True)
    return options


async def connect(engine: EngineConfig, home: Path, identity: str = "") -> Client:
    """A client of the engine; EngineError naming the address when it cannot be reached."""
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    global connected
    connected = True
    options = connect_options(engine, home)
    try:
        return await asyncio.wait_for(
            Client.connect(
                engine.address,
                namespace=engine.namespace,
                data_converter=pydantic_data_converter,
                identity=identity or f"loopd@{os.uname().nodename}:{os.getpid()}",
                **options,
            ),
            CONNECT_TIMEOUT,
        )
    except (RuntimeError, OSError, TimeoutError) as exc:
        raise EngineError(
            f"cannot reach the engine at {engine.address} (namespace {engine.namespace}): "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}. Fix: start it "
            "(for a try on this machine: `temporal server start-dev`), or correct [engine] "
            "address in loopd.toml"
        ) from None


def leave(code: int) -> int:
    """End a process that opened a client at once, with `code`; otherwise return `code`."""
    if not connected:
        return code
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
