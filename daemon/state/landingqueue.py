"""`state/landing/KEY.toml`: the queue of succeeded runs waiting to land on one target branch.

One file per repository and target (KEY: a hash of both, the file names them). A run enters
before it lands and leaves once its landing is recorded in its `run.toml`; the step it is at
is written before the step is done, so a loopd killed at any point finds, on restart, which
run was landing and whether it had started to move the target (`moving`, with the commit it
was moving to: git then says whether the target holds it). `locks/landing-KEY.lock` is held
by whoever lands on that target now (a daemon, `loopd once`, `loopd land`, the home's
Temporal finish activity): one landing at a time per target across processes, in the order
the runs entered (`landing_turn`).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Literal

from daemon.processes import same_process
from daemon.state.atomic import FILE_MODE, ensure_dir, write_atomic
from daemon.state.records import Record
from daemon.state.store import StateStore, UnreadableFile, dump_toml, read_model

QUEUE_DIR = "landing"
TURN_POLL = 0.1  # seconds between looks at whether a waiting run's turn came
LandingStep = Literal["queued", "landing", "moving"]


class QueuedLanding(Record):
    """A run in a target's queue, and how far its landing went."""

    run_id: str
    loop: str
    queued_at: datetime
    step: LandingStep = "queued"
    tries: int = 0  # landings begun (a restart that redoes one counts it again)
    old: str = ""  # moving: the target's commit before the move
    new: str = ""  # moving: the commit the target moves to
    # The process finishing the run and its mark (processes.process_mark): while it lives,
    # the runs that entered after this one wait their turn.
    pid: int = 0
    mark: str = ""


class LandingQueue(Record):
    """The runs waiting to land on `target` of `repo`, in the order they entered."""

    repo: str = ""
    target: str = ""
    runs: list[QueuedLanding] = []

    def find(self, run_id: str) -> QueuedLanding | None:
        return next((q for q in self.runs if q.run_id == run_id), None)

    def landing_now(self) -> QueuedLanding | None:
        """The run whose landing is under way (or was, when loopd was killed)."""
        return next((q for q in self.runs if q.step != "queued"), None)

    def line(self) -> str:
        """The queue in one line, for the report."""
        now = self.landing_now()
        queued = [q.run_id for q in self.runs if q is not now]
        return (
            f"{self.target} of {self.repo}: "
            + (f"landing {now.run_id} ({now.step})" if now else "none landing")
            + (f"; queued {', '.join(queued)}" if queued else "; none queued")
        )


def queue_key(repo: str, target: str) -> str:
    """The file name's part for `repo` (resolved) and `target`."""
    name = f"{Path(repo).resolve()}\0{target}".encode()
    return hashlib.sha256(name).hexdigest()[:16]


def queue_path(store: StateStore, repo: str, target: str) -> Path:
    return store.root / QUEUE_DIR / f"{queue_key(repo, target)}.toml"


def load_landing_queue(store: StateStore, repo: str, target: str) -> LandingQueue:
    """The queue of `target` of `repo`; empty when none (or unreadable, reported)."""
    path = queue_path(store, repo, target)
    try:
        return read_model(path, LandingQueue)
    except FileNotFoundError:
        return LandingQueue(repo=str(Path(repo).resolve()), target=target)
    except UnreadableFile as exc:
        store.report_unreadable(exc)
        return LandingQueue(repo=str(Path(repo).resolve()), target=target)


def landing_queues(store: StateStore) -> list[LandingQueue]:
    """Every target's queue that holds a run, for `status` and the report."""
    folder = store.root / QUEUE_DIR
    found = []
    for path in sorted(folder.glob("*.toml")) if folder.is_dir() else []:
        try:
            queue = read_model(path, LandingQueue)
        except (FileNotFoundError, UnreadableFile):
            continue
        if queue.runs:
            found.append(queue)
    return found


@contextmanager
def _flock(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock; a killed holder's is released by the kernel


def update_landing_queue(
    store: StateStore, repo: str, target: str, change: Callable[[LandingQueue], None]
) -> LandingQueue:
    """Read, change and write the queue of `target` atomically, one writer at a time."""
    key = queue_key(repo, target)
    with _flock(ensure_dir(store.root / "locks") / f"landing-{key}.queue.lock"):
        queue = load_landing_queue(store, repo, target)
        change(queue)
        ensure_dir(store.root / QUEUE_DIR)
        write_atomic(queue_path(store, repo, target), dump_toml(queue))
        return queue


@contextmanager
def landing_lock(store: StateStore, repo: str, target: str) -> Iterator[None]:
    """Held while one run lands on `target` of `repo` (waits for the landing under way)."""
    key = queue_key(repo, target)
    with _flock(ensure_dir(store.root / "locks") / f"landing-{key}.lock"):
        yield


def _ahead(queue: LandingQueue, run_id: str) -> list[str]:
    """The runs that entered before `run_id` and wait with a live finisher."""
    ahead: list[str] = []
    for entry in queue.runs:
        if entry.run_id == run_id:
            return ahead
        if same_process(entry.pid, entry.mark):
            ahead.append(entry.run_id)
    return []  # not queued (a record from before the queue): nobody is ahead


@contextmanager
def landing_turn(store: StateStore, repo: str, target: str, run_id: str) -> Iterator[None]:
    """`landing_lock`, taken when it is `run_id`'s turn: first in, first out. A run ahead
    whose finisher was killed is passed over until its process comes back (and enters again
    at its place); a finisher that fails gives its turn up (its claim is cleared)."""
    while True:
        with landing_lock(store, repo, target):
            if not _ahead(load_landing_queue(store, repo, target), run_id):
                try:
                    yield
                except BaseException:
                    update_landing_queue(store, repo, target, lambda q: _unclaim(q, run_id))
                    raise
                return
        time.sleep(TURN_POLL)


def _unclaim(queue: LandingQueue, run_id: str) -> None:
    entry = queue.find(run_id)
    if entry is not None:
        entry.pid, entry.mark = 0, ""
