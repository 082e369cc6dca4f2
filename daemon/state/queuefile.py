"""`state/queue.toml`: the runs the daemon has queued, and the inbox files the queue holds.

A pending run keeps its first trigger, a count of the triggers merged into it and the last
`MERGED_KEPT` of them: a burst of ten thousand pushes makes one run and a small file. The
inbox files a save accounts for are listed in `taken`; the daemon deletes them only after
the save, and a restart deletes (without taking them again) those a crash left behind.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import field_validator, model_validator

from daemon.state.records import Record, RunTrigger, Trigger

MERGED_KEPT = 20


class PendingRun(Record):
    """A run waiting to start: its RUN_ID (kept when it starts), its first trigger, merges."""

    id: str
    loop: str
    trigger: Trigger
    queued_at: datetime
    merged: list[Trigger] = []  # the last MERGED_KEPT merged triggers, oldest first
    merged_count: int = 0  # every trigger merged into it

    @field_validator("id", "loop")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        # Both become folder and file names under state/.
        if not value or "/" in value or value.startswith("."):
            raise ValueError(f"{value!r} is not a run id or loop name")
        return value

    @model_validator(mode="after")
    def _bounded(self) -> PendingRun:
        # A file written before merges were counted holds every merged trigger.
        self.merged_count = max(self.merged_count, len(self.merged))
        if len(self.merged) > MERGED_KEPT:
            self.merged = self.merged[-MERGED_KEPT:]
        return self

    def merge(self, trigger: Trigger) -> None:
        """Count `trigger` into this run and keep it among the last few."""
        self.merged_count += 1
        self.merged.append(trigger)
        if len(self.merged) > MERGED_KEPT:
            del self.merged[0]

    def run_trigger(self) -> RunTrigger:
        """`[trigger]` of run.toml: the first trigger, with the merged ones summarized."""
        first = self.trigger
        return RunTrigger(
            kind=first.kind,
            reason=first.reason,
            ref=first.ref,
            old=first.old,
            new=first.new,
            ts=first.ts,
            note=first.note,
            retry_of=first.retry_of,
            paths=list(first.paths),
            inbox=[t.id for t in [first, *self.merged] if t.id],
            merged=[t.summary() for t in self.merged],
            merged_count=self.merged_count,
            force=any(t.force for t in [first, *self.merged]),
            remote=first.remote,
            not_before=first.not_before,
        )


class QueueFile(Record):
    """The whole of `state/queue.toml`."""

    pending: list[PendingRun] = []
    taken: list[str] = []  # inbox file names this save holds (or recorded as events)
