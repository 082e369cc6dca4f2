"""A worker's own record of the attempts it ran, beside (never over) the home's record.

On a worker machine `state/runs/RUN_ID/attempt-N/` holds the attempts it ran (prompt.md,
transcript.jsonl, checks.log, diff.patch), `state/runs/RUN_ID/worker.toml` its view of the
run (with the agent's process groups while an attempt runs) and `state/worker-events.jsonl`
what happened on this machine in `state/events.jsonl`. `state/worker-live/` marks the attempts
under way: a worker killed with -9 finds them when it starts again and kills what they left
running. The home (which is also a worker for the default queue) keeps its own `run.toml`
and `events.jsonl`, so its worker's events go to `state/worker-events.jsonl`.
"""

from __future__ import annotations

import os

from daemon.state.atomic import write_atomic
from daemon.state.events import EventLog
from daemon.state.records import RunRecord
from daemon.state.store import StateStore, dump_toml, read_model

RECORD = "worker.toml"
LIVE = "worker-live"
EVENTS = "worker-events.jsonl"


class WorkerStore(StateStore):
    """The state/ of a home as a worker writes it."""

    def __init__(self, root, events_rotate: int = 64_000_000, beside_home: bool = False) -> None:  # noqa: ANN001
        super().__init__(root, events_rotate)
        if beside_home:  # the home's own log holds the run's events as the home records them
            self.events = EventLog(root / EVENTS, rotate_bytes=events_rotate)

    def save_run(self, run: RunRecord) -> None:
        write_atomic(self.run_dir(run.id) / RECORD, dump_toml(run))

    def load_run(self, run_id: str) -> RunRecord:
        return read_model(self.run_dir(run_id) / RECORD, RunRecord)

    def mark_live(self, run_id: str) -> None:
        write_atomic(self.root / LIVE / run_id, "")

    def save_run_behind(self, run: RunRecord) -> None:
        self.save_run(run)

    def begin_run(self, run: RunRecord, behind: bool = False) -> None:
        self.save_run(run)
        self.mark_live(run.id)

    def unmark_live(self, run_id: str) -> None:
        (self.root / LIVE / run_id).unlink(missing_ok=True)

    def live_runs(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.root / LIVE) if not n.startswith("."))
        except FileNotFoundError:
            return []
