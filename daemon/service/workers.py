"""The worker pool: each run in its own thread, holding its loop's lock until it ends.

`max_concurrent_runs` counts run slots, not threads: a run parked on a usage limit or waiting
for the verifier gives its slot back (daemon/runs/slots.py), so its thread may outlive it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from daemon.config import Loop
from daemon.processes import reap_orphans
from daemon.runs.slots import RunSlots
from daemon.scheduling.queue import RunQueue
from daemon.service.console import ended_lines, say, started_line
from daemon.service.context import Context
from daemon.state.lock import HomeLock, LockHeld
from daemon.state.records import RunRecord

if TYPE_CHECKING:
    from daemon.runs.executor import RunExecutor


@dataclass
class Worker:
    """A run in its own thread."""

    loop: str
    run_id: str
    thread: threading.Thread
    executor: RunExecutor

    @property
    def run(self) -> RunRecord:
        return self.executor.run


class WorkerPool:
    """Starts ready runs up to `max_concurrent_runs`, reaps finished ones, stops them all."""

    def __init__(self, ctx: Context, queue: RunQueue) -> None:
        self.ctx = ctx
        self.queue = queue
        self.workers: dict[str, Worker] = {}
        self._reap_orphans = False
        self.slots: RunSlots = ctx.services.slots or RunSlots(
            lambda: self.ctx.config.daemon.limits.max_concurrent_runs, ctx.flags.wake.set
        )
        ctx.services.slots = self.slots  # runs give their slot back through their services
        # The run machinery is imported on first use (the quick commands must not load it):
        # here ahead of it, so the first trigger after a start does not wait for the import.
        threading.Thread(target=_import_runs, name="loopd-warm-up", daemon=True).start()

    def running(self, loop: str) -> bool:
        """Whether this daemon runs `loop` now."""
        return loop in self.workers

    def run_of(self, loop: str) -> RunRecord | None:
        worker = self.workers.get(loop)
        return worker.run if worker is not None else None

    def run_ids(self) -> set[str]:
        return {w.run_id for w in self.workers.values()}

    # starting --------------------------------------------------------------------------
    def launch(self, loop: Loop, run: RunRecord, lock: HomeLock) -> None:
        """Run `run` in its own thread, holding the loop's lock (taken) until it ends."""
        from daemon.runs.executor import RunExecutor

        executor = RunExecutor(self.ctx.services, loop, run)
        wake = self.ctx.flags.wake

        def body() -> None:
            try:
                executor.execute()
            finally:
                lock.release()
                wake.set()  # reaped at once, and the loop's next run may start

        thread = threading.Thread(target=body, name=f"run-{run.id}", daemon=True)
        self.slots.add(run.id)
        self.workers[loop.name] = Worker(
            loop=loop.name, run_id=run.id, thread=thread, executor=executor
        )
        self.queue.started(loop.name, run.id)
        say([started_line(run)])
        thread.start()

    def resume(self, loop: Loop, run: RunRecord) -> None:
        """Launch a recovered run (its loop's lock is free: recovery checked it)."""
        lock = self.ctx.store.loop_lock(loop.name)
        lock.acquire()
        self.launch(loop, run, lock)

    def start_ready(self, now: datetime, held: Iterable[str] = ()) -> None:
        """Start pending runs while a run slot is free; loops in `held` wait (quota, budget)."""
        from daemon.runs.executor import new_run

        if not self.queue.pending():
            return
        while self.slots.free() > 0:
            blocked = self._busy_loops() | set(self.workers) | set(held)
            pending = self.queue.next_ready(None, blocked)
            if pending is None:
                return
            loop = self.ctx.loops.get(pending.loop)
            if loop is None:
                self.queue.finished(pending.loop)
                continue
            lock = self.ctx.store.loop_lock(loop.name)
            try:
                lock.acquire()
            except LockHeld:
                # `loopd once` took the loop since `_busy_loops` looked: wait for it.
                self.queue.finished(pending.loop)
                self.queue.restore(pending)
                return
            # Its record is made durable on its own thread, the queue's save waits for it.
            self.launch(loop, new_run(self.ctx.services, loop, pending, behind=True), lock)

    def _busy_loops(self) -> set[str]:
        store = self.ctx.store
        busy = set(store.paused_loops())
        for name in self.ctx.loops:
            if name not in self.workers and store.loop_lock(name).is_held():
                busy.add(name)  # `loopd once` is running it
        return busy

    # ending ----------------------------------------------------------------------------
    def reap(self) -> list[RunRecord]:
        """Forget the workers whose thread ended; their runs."""
        if self.workers or self._reap_orphans:
            # Orphans of what runs started (re-parented to loopd, the subreaper) are reaped.
            reap_orphans()
            self._reap_orphans = bool(self.workers)
        done = []
        for name, worker in list(self.workers.items()):
            if not worker.thread.is_alive():
                worker.thread.join()
                done.append(worker.run)
                say(ended_lines(worker.run))
                self.slots.forget(worker.run_id)
                del self.workers[name]
                self.queue.finished(name)
        return done

    def healthy(self, now_monotonic: float) -> bool:
        """No worker is wedged (silent past its longest step)."""
        return not any(w.executor.wedged(now_monotonic) for w in self.workers.values())

    def stop(self, grace: float) -> list[RunRecord]:
        """Interrupt every run (`grace` for a running attempt), wait; the runs interrupted."""
        for worker in self.workers.values():
            worker.executor.interrupt(grace)
        for worker in self.workers.values():
            worker.thread.join(timeout=grace + 30)
        return [w.run for w in self.workers.values() if w.run.outcome == "interrupted"]

    def shutdown_now(self) -> None:
        """A second signal: stop waiting for running attempts."""
        for worker in self.workers.values():
            worker.executor.interrupt(0)


def _import_runs() -> None:
    import daemon.runs.executor  # noqa: F401
