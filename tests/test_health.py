"""The systemd watchdog is fed only while run workers make progress."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from daemon.home import Home
from daemon.runparts.services import RunServices
from daemon.runs.executor import WEDGE_MARGIN, RunExecutor
from daemon.scheduling.queue import RunQueue
from daemon.service.context import Context, Flags
from daemon.service.workers import Worker, WorkerPool
from daemon.state.records import RunRecord, RunTrigger
from daemon.state.store import StateStore
from tests.helpers import make_home, make_repo

NOW = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)


def test_a_worker_without_progress_past_its_longest_step_is_wedged(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    root = make_home(
        tmp_path / "home",
        '[agents.a]\nadapter = "command"\ncommand = ["true"]\n',
        {
            "l": f'repo = "{repo}"\ntask = "t"\nagent = "a"\nattempt_timeout = "60s"\n'
            'stall_after = "20s"\ncheck_timeout = "30s"\n'
        },
    )
    home = Home(root)
    loaded = home.load()
    store = StateStore(home.state_dir)
    services = RunServices(home=home, config=loaded.daemon, store=store, clock=lambda: NOW)
    run = RunRecord(
        id="20261129T020000Z-l-0000",
        loop="l",
        task="t",
        trigger=RunTrigger(kind="manual", ts=NOW),
        started=NOW,
    )
    executor = RunExecutor(services, loaded.loops["l"], run)
    ctx = Context(
        home=home, store=store, flags=Flags(), config=loaded, services=services, clock=lambda: NOW
    )
    pool = WorkerPool(ctx, RunQueue())
    pool.workers["l"] = Worker(
        loop="l", run_id=run.id, thread=threading.current_thread(), executor=executor
    )
    # The longest step is the attempt (60 s); past it and the margin, the worker is stuck.
    now = time.monotonic()
    assert not executor.wedged(now) and pool.healthy(now)
    later = now + 60 + WEDGE_MARGIN - 5
    assert not executor.wedged(later) and pool.healthy(later)
    stuck = now + 60 + WEDGE_MARGIN + 1
    assert executor.wedged(stuck) and not pool.healthy(stuck)
