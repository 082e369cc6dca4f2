"""StateStore: paths under `state/`, run ids, run records, status, the inbox, the event log."""

from __future__ import annotations

import json
import os
import secrets
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import tomli_w
from pydantic import BaseModel, ValidationError

from daemon.regularfile import STATE_MAX, NotRegular, read_regular
from daemon.state.atomic import ensure_dir, fsync_dirs, write_atomic
from daemon.state.background import Background
from daemon.state.events import EventLog
from daemon.state.eventtypes import Event
from daemon.state.lock import HomeLock
from daemon.state.parsed import parse_toml
from daemon.state.queuefile import PendingRun, QueueFile
from daemon.state.records import RunRecord, StatusFile, Trigger, make_run_id
from daemon.state.runids import listed_run_ids, loop_of
from daemon.state.space import StateSpace

M = TypeVar("M", bound=BaseModel)


class UnreadableFile(ValueError):
    """A state file exists but cannot be read or parsed (a bad byte, a cut, a wrong value).

    A ValueError, so that readers which already skip a record that does not parse still do.
    """

    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"cannot read {path}: {reason}")


def read_model(path: Path, model: type[M]) -> M:
    """`path` parsed as TOML into `model`; FileNotFoundError when absent, else UnreadableFile."""
    try:
        # Never a link, a FIFO or a device (a read that hangs), never past STATE_MAX.
        data = parse_toml(read_regular(path, cap=STATE_MAX))
        return model.model_validate(data)
    except FileNotFoundError:
        raise
    except NotRegular as exc:
        raise UnreadableFile(path, exc.reason) from None
    except ValidationError as exc:
        if not exc.errors():
            raise UnreadableFile(path, str(exc)) from None
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UnreadableFile(path, f"{where}: {first['msg']}") from None
    except UnicodeDecodeError as exc:
        raise UnreadableFile(path, f"not UTF-8 (byte {exc.start})") from None
    except (OSError, ValueError) as exc:  # TOMLDecodeError is a ValueError
        raise UnreadableFile(path, str(exc).splitlines()[0] if str(exc) else repr(exc)) from None


def warn_on_stderr(problem: UnreadableFile) -> None:
    """The default report of an unreadable state file: one line on stderr."""
    print(f"loopd: warning: {problem}; skipped", file=sys.stderr, flush=True)


def _strip_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_none(v) for v in value if v is not None]
    return value


def dump_toml(model: BaseModel) -> str:
    """A record as TOML; None values are left out (TOML has no null)."""
    return tomli_w.dumps(_strip_none(model.model_dump(mode="python")))


HOME_ID_FILE = "home-id"


class StateStore:
    """Owns `state/` of one home."""

    def __init__(
        self,
        root: Path,
        events_rotate: int = 64_000_000,
        warn: Callable[[UnreadableFile], None] = warn_on_stderr,
    ) -> None:
        self.root = root
        ensure_dir(root)
        for sub in ("runs", "inbox", "progress", "escalations"):
            ensure_dir(root / sub)
        self.events = EventLog(root / "events.jsonl", rotate_bytes=events_rotate)
        self.lock = HomeLock(root / "loopd.lock")
        self.space = StateSpace(root)  # marked full by a write that found no room
        self.warn = warn  # told once per unreadable file (and again when it changes)
        self._warned: set[tuple[Path, int]] = set()
        # Called with each run record saved: its phase changes here on both engines (the
        # traces of [telemetry] follow them); never raise.
        self.run_observers: list[Callable[[RunRecord], None]] = []
        # Records being written durably on threads of their own, by run id (`_behind`).
        self._behind: dict[str, Background[None]] = {}
        self._behind_lock = threading.Lock()

    def home_id(self) -> str:
        """This home's id (`state/home-id`, made on first use): rules it exports name it."""
        path = self.root / HOME_ID_FILE
        try:
            text = read_regular(path, cap=1000).decode("ascii", "replace").strip()
        except OSError:
            text = ""
        if len(text) == 32 and all(c in "0123456789abcdef" for c in text):
            return text
        text = secrets.token_hex(16)
        write_atomic(path, text + "\n")
        return text

    def report_unreadable(self, problem: UnreadableFile) -> None:
        """Name an unreadable file once (per version of it), through `warn`."""
        try:
            mark = os.stat(problem.path).st_mtime_ns
        except OSError:
            mark = 0
        if (problem.path, mark) in self._warned:
            return
        self._warned.add((problem.path, mark))
        self.warn(problem)

    def _read_or_empty(self, path: Path, model: type[M]) -> M:
        """`path` as `model`; the model's defaults when absent or unreadable (reported)."""
        try:
            return read_model(path, model)
        except FileNotFoundError:
            return model()
        except UnreadableFile as exc:
            self.report_unreadable(exc)
            return model()

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

    def answers_path(self, loop: str) -> Path:
        return self.root / "answers" / f"{loop}.md"

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
        """Write run.toml atomically and durably, after a write of it still under way on its
        own thread."""
        self.settle_run(run.id)
        write_atomic(self.run_dir(run.id) / "run.toml", dump_toml(run))
        self._observe(run)

    def save_run_behind(self, run: RunRecord) -> None:
        """Write run.toml durably, as it is now, on a thread of its own: its fsyncs overlap
        what the caller does next. The run's next save, or `settle_run`, waits for it."""
        self.settle_run(run.id)
        text = dump_toml(run)
        self._observe(run)
        path = self.run_dir(run.id) / "run.toml"
        self._put_behind(run.id, Background(write_atomic, path, text))

    def settle_run(self, run_id: str) -> None:
        """Wait for the run's record being written on its own thread; raise what it raised."""
        with self._behind_lock:
            pending = self._behind.pop(run_id, None)
        if pending is not None:
            pending.result()

    def wait_behind(self) -> None:
        """Wait for every record being written on its own thread (what it raised is left
        to the run's own next save, or `settle_run`)."""
        with self._behind_lock:
            pending = list(self._behind.values())
        for work in pending:
            work.wait()

    def _put_behind(self, run_id: str, work: Background[None]) -> None:
        with self._behind_lock:
            self._behind[run_id] = work

    def _observe(self, run: RunRecord) -> None:
        for observer in self.run_observers:
            try:
                observer(run)
            except Exception:  # noqa: BLE001, S110 - tracing must never fail a save
                pass

    def load_run(self, run_id: str) -> RunRecord:
        """The run's record; FileNotFoundError when it has none, UnreadableFile when bad."""
        return read_model(self.run_dir(run_id) / "run.toml", RunRecord)

    def run_ids(self, loop: str | None = None) -> list[str]:
        """Run ids, oldest first (they sort by time)."""
        return listed_run_ids(self.runs_dir, loop)

    def last_run_ids(self) -> dict[str, str]:
        """The newest run id of each loop, from one listing of `runs/`."""
        newest: dict[str, str] = {}
        for run_id in reversed(self.run_ids()):
            newest.setdefault(loop_of(run_id), run_id)
        return newest

    def iter_runs(self, loop: str | None = None, newest_first: bool = True) -> Iterator[RunRecord]:
        """Readable run records; an unreadable one is reported (`warn`) and skipped."""
        ids = self.run_ids(loop)
        for run_id in reversed(ids) if newest_first else ids:
            try:
                yield self.load_run(run_id)
            except FileNotFoundError:
                continue  # a folder whose record is not written yet
            except UnreadableFile as exc:
                self.report_unreadable(exc)

    def loop_lock(self, loop: str) -> HomeLock:
        """Held by whoever runs the loop now (the daemon's worker or `loopd once`)."""
        return HomeLock(self.root / "locks" / f"{loop}.lock")

    # live runs: a marker per run that has no outcome yet, so a restart finds them cheaply
    def mark_live(self, run_id: str) -> None:
        write_atomic(self.root / "live" / run_id, "")

    def begin_run(self, run: RunRecord, behind: bool = False) -> None:
        """A new run's record and its live marker, durable: the record's data is synced
        before its rename, then the folders naming the record, the marker and the run's
        folder in one pass (on a journalling filesystem two commits where a durable save of
        each made four). `behind`: on a thread of its own (see `save_run_behind`); the
        daemon waits for it (`wait_behind`) before its queue no longer holds the run."""
        self.settle_run(run.id)
        text = dump_toml(run)
        self._observe(run)
        if behind:
            self._put_behind(run.id, Background(self._begin, run.id, text))
        else:
            self._begin(run.id, text)

    def _begin(self, run_id: str, text: str) -> None:
        folder = self.run_dir(run_id)
        write_atomic(folder / "run.toml", text, sync_folder=False)
        live = self.root / "live"
        write_atomic(live / run_id, "", durable=False)  # empty: its name is all it holds
        fsync_dirs([folder, live, folder.parent])

    def unmark_live(self, run_id: str) -> None:
        (self.root / "live" / run_id).unlink(missing_ok=True)

    def live_runs(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.root / "live") if not n.startswith("."))
        except FileNotFoundError:
            return []

    # the daemon's queue of pending runs, for `loopd status` and `loopd cancel`
    @property
    def queue_path(self) -> Path:
        return self.root / "queue.toml"

    def save_queue(self, queue: QueueFile) -> None:
        write_atomic(self.queue_path, dump_toml(queue))

    def load_queue(self) -> QueueFile:
        """The saved queue; empty when there is none or it is unreadable (reported)."""
        return self._read_or_empty(self.queue_path, QueueFile)

    def queued_run(self, run_id: str) -> PendingRun | None:
        return next((p for p in self.load_queue().pending if p.id == run_id), None)

    # control -------------------------------------------------------------
    def request_cancel(self, run_id: str) -> None:
        write_atomic(self.root / "control" / f"cancel-{run_id}", run_id)

    def cancel_requested(self, run_id: str) -> bool:
        return (self.root / "control" / f"cancel-{run_id}").exists()

    def clear_cancel(self, run_id: str) -> None:
        (self.root / "control" / f"cancel-{run_id}").unlink(missing_ok=True)

    def request_reload(self) -> str:
        """Ask the daemon to reload (with SIGHUP after this); the token its event will name."""
        token = secrets.token_hex(6)
        write_atomic(self.root / "control" / f"reload-{token}", token)
        return token

    def take_reload_requests(self) -> list[str]:
        """The reload requests waiting, removed (the daemon, as it reloads)."""
        folder = self.root / "control"
        try:
            names = sorted(n for n in os.listdir(folder) if n.startswith("reload-"))
        except FileNotFoundError:
            return []
        for name in names:
            (folder / name).unlink(missing_ok=True)
        return [name.removeprefix("reload-") for name in names]

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
        """status.toml; empty when absent or unreadable (reported)."""
        return self._read_or_empty(self.status_path, StatusFile)

    def save_status(self, status: StatusFile) -> None:
        # A view for the commands, written whole at every start and never read back by the
        # daemon: an fsync each tick would only hold up the runs' own durable writes.
        write_atomic(self.status_path, dump_toml(status), durable=False)

    # inbox ---------------------------------------------------------------
    def put_trigger(self, trigger: Trigger, durable: bool = True) -> Path:
        """Drop a trigger into `state/inbox/` for the daemon to take."""
        stamp = trigger.ts.astimezone(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        name = f"{stamp}-{secrets.token_hex(4)}.json"
        path = self.inbox_dir / name
        data = trigger.model_dump(mode="json", exclude={"id"})
        write_atomic(path, json.dumps(data), durable=durable)
        return path

    def inbox_names(self) -> list[str]:
        """Names of the trigger files waiting in the inbox, oldest first."""
        try:
            names = os.listdir(self.inbox_dir)
        except FileNotFoundError:
            return []
        return sorted(n for n in names if n.endswith(".json") and not n.startswith("."))

    def read_trigger(self, name: str) -> Trigger | None:
        """One inbox file as a trigger (left in place); a bad file is moved to `inbox/bad/`."""
        path = self.inbox_dir / name
        try:
            trigger = Trigger.model_validate_json(read_regular(path, cap=STATE_MAX))
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            return None
        except (OSError, ValueError) as exc:  # ValidationError and bad JSON are ValueErrors
            bad = ensure_dir(self.inbox_dir / "bad")
            os.replace(path, bad / name)
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self.events.append(Event.TRIGGER_REJECTED, file=f"inbox/bad/{name}", reason=reason)
            return None
        trigger.id = name
        return trigger

    def remove_inbox(self, names: Iterable[str]) -> None:
        """Delete taken inbox files (only once the queue that holds them is saved)."""
        for name in names:
            if "/" in name or name.startswith("."):
                continue  # only plain inbox file names, whatever a queue file holds
            (self.inbox_dir / name).unlink(missing_ok=True)
