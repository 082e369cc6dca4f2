"""StateStore: paths under `state/`, run ids, run records, status, the inbox, the event log."""

from __future__ import annotations

import json
import os
import secrets
import tomllib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import tomli_w
from pydantic import BaseModel, ValidationError

from daemon.clock import utc_now
from daemon.state.atomic import ensure_dir, write_atomic
from daemon.state.events import EventLog
from daemon.state.lock import HomeLock
from daemon.state.records import RunRecord, StatusFile, Trigger, make_run_id


def _strip_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_none(v) for v in value if v is not None]
    return value


def dump_toml(model: BaseModel) -> str:
    """A record as TOML; None values are left out (TOML has no null)."""
    return tomli_w.dumps(_strip_none(model.model_dump(mode="python")))


class StateStore:
    """Owns `state/` of one home."""

    def __init__(self, root: Path, events_rotate: int = 64_000_000) -> None:
        self.root = root
        ensure_dir(root)
        for sub in ("runs", "inbox", "progress", "escalations"):
            ensure_dir(root / sub)
        self.events = EventLog(root / "events.jsonl", rotate_bytes=events_rotate)
        self.lock = HomeLock(root / "loopd.lock")

    # paths ---------------------------------------------------------------
    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    @property
    def inbox_dir(self) -> Path:
        return self.root / "inbox"

    @property
    def status_path(self) -> Path:
        return self.root / "status.toml"

    def run_dir(self, run_id: str) -> Path:
        return self.runs_dir / run_id

    def attempt_dir(self, run_id: str, n: int) -> Path:
        return ensure_dir(self.run_dir(run_id) / f"attempt-{n}")

    def progress_path(self, loop: str) -> Path:
        return self.root / "progress" / f"{loop}.md"

    def escalation_path(self, run_id: str) -> Path:
        return self.root / "escalations" / f"{run_id}.md"

    # runs ----------------------------------------------------------------
    def new_run_id(self, loop: str, now: datetime) -> str:
        bump = 0
        while True:
            run_id = make_run_id(loop, now, bump)
            if not self.run_dir(run_id).exists():
                ensure_dir(self.run_dir(run_id))
                return run_id
            bump += 1

    def save_run(self, run: RunRecord) -> None:
        write_atomic(self.run_dir(run.id) / "run.toml", dump_toml(run))

    def load_run(self, run_id: str) -> RunRecord:
        with (self.run_dir(run_id) / "run.toml").open("rb") as fh:
            return RunRecord.model_validate(tomllib.load(fh))

    def run_ids(self, loop: str | None = None) -> list[str]:
        """Run ids, oldest first (they sort by time)."""
        try:
            names = os.listdir(self.runs_dir)
        except FileNotFoundError:
            return []
        ids = sorted(n for n in names if not n.startswith("."))
        if loop is not None:
            ids = [i for i in ids if i[17:].rsplit("-", 1)[0] == loop]
        return ids

    def last_run_ids(self) -> dict[str, str]:
        """The newest run id of each loop, from one listing of `runs/`."""
        newest: dict[str, str] = {}
        for run_id in reversed(self.run_ids()):
            newest.setdefault(run_id[17:].rsplit("-", 1)[0], run_id)
        return newest

    def iter_runs(self, loop: str | None = None, newest_first: bool = True) -> Iterator[RunRecord]:
        ids = self.run_ids(loop)
        for run_id in reversed(ids) if newest_first else ids:
            try:
                yield self.load_run(run_id)
            except (OSError, tomllib.TOMLDecodeError, ValidationError):
                continue

    def loop_lock(self, loop: str) -> HomeLock:
        """Held by whoever runs the loop now (the daemon's worker or `loopd once`)."""
        return HomeLock(self.root / "locks" / f"{loop}.lock")

    # live runs: a marker per run that has no outcome yet, so a restart finds them cheaply
    def mark_live(self, run_id: str) -> None:
        write_atomic(self.root / "live" / run_id, "")

    def unmark_live(self, run_id: str) -> None:
        (self.root / "live" / run_id).unlink(missing_ok=True)

    def live_runs(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.root / "live") if not n.startswith("."))
        except FileNotFoundError:
            return []

    # the daemon's queue of pending runs, for `loopd status` and `loopd cancel`
    def save_queue(self, entries: list[dict[str, Any]]) -> None:
        write_atomic(self.root / "queue.toml", tomli_w.dumps({"pending": entries}))

    def load_queue(self) -> list[dict[str, Any]]:
        try:
            with (self.root / "queue.toml").open("rb") as fh:
                return list(tomllib.load(fh).get("pending", []))
        except (OSError, tomllib.TOMLDecodeError):
            return []

    def queued_run(self, run_id: str) -> dict[str, Any] | None:
        return next((e for e in self.load_queue() if e.get("id") == run_id), None)

    # control -------------------------------------------------------------
    def request_cancel(self, run_id: str) -> None:
        write_atomic(self.root / "control" / f"cancel-{run_id}", run_id)

    def cancel_requested(self, run_id: str) -> bool:
        return (self.root / "control" / f"cancel-{run_id}").exists()

    def clear_cancel(self, run_id: str) -> None:
        (self.root / "control" / f"cancel-{run_id}").unlink(missing_ok=True)

    def paused_loops(self) -> set[str]:
        folder = self.root / "paused"
        try:
            return {n for n in os.listdir(folder) if not n.startswith(".")}
        except FileNotFoundError:
            return set()

    def set_paused(self, loop: str, paused: bool) -> None:
        path = self.root / "paused" / loop
        if paused:
            write_atomic(path, "")
        else:
            path.unlink(missing_ok=True)

    # status --------------------------------------------------------------
    def load_status(self) -> StatusFile:
        try:
            with self.status_path.open("rb") as fh:
                return StatusFile.model_validate(tomllib.load(fh))
        except (OSError, tomllib.TOMLDecodeError, ValidationError):
            return StatusFile()

    def save_status(self, status: StatusFile) -> None:
        write_atomic(self.status_path, dump_toml(status))

    # inbox ---------------------------------------------------------------
    def put_trigger(self, trigger: Trigger) -> Path:
        """Drop a trigger into `state/inbox/` for the daemon to take."""
        stamp = trigger.ts.astimezone(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        name = f"{stamp}-{secrets.token_hex(4)}.json"
        path = self.inbox_dir / name
        data = trigger.model_dump(mode="json", exclude={"id"})
        write_atomic(path, json.dumps(data))
        return path

    def take_triggers(self) -> list[Trigger]:
        """Read and remove every inbox file, oldest first; a bad file becomes `inbox/bad/`."""
        out = []
        try:
            names = sorted(os.listdir(self.inbox_dir))
        except FileNotFoundError:
            return out
        for name in names:
            path = self.inbox_dir / name
            if not name.endswith(".json") or name.startswith(".") or not path.is_file():
                continue
            try:
                trigger = Trigger.model_validate_json(path.read_bytes())
                trigger.id = name
            except (OSError, ValidationError, ValueError) as exc:
                bad = ensure_dir(self.inbox_dir / "bad")
                os.replace(path, bad / name)
                self.events.append(
                    "trigger_rejected",
                    utc_now(),
                    file=f"inbox/bad/{name}",
                    reason=str(exc).splitlines()[0],
                )
                continue
            path.unlink(missing_ok=True)
            out.append(trigger)
        return out
