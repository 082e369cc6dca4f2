"""What holds new runs back, kept across restarts: a profile's usage limit, a profile's
refused login, and the spent token budgets already announced.

`state/quota.toml`: per agent profile, the moment its usage limit resets (written by whoever
runs into it: a daemon's run or `loopd once`, under a file lock). `state/budget.toml`: per
budget scope, the last day whose exhaustion was announced (the daemon's alone), so that
`budget_exhausted` is recorded once a day however often loopd restarts. `state/logins.toml`:
per agent profile whose provider refused its login, the run that found it and its escalation;
held until `loopd check` finds the login working (no time lifts it).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from daemon.state.atomic import FILE_MODE, ensure_dir, write_atomic
from daemon.state.records import Record
from daemon.state.store import StateStore, UnreadableFile, dump_toml, read_model

M = TypeVar("M", bound=Record)


class QuotaHold(Record):
    """A profile's usage limit: its runs wait until `resume_at`."""

    resume_at: datetime
    since: datetime
    run: str = ""
    loop: str = ""
    message: str = ""


class QuotaFile(Record):
    profiles: dict[str, QuotaHold] = {}


class LoginHold(Record):
    """A profile whose provider refused its login: its runs wait until `loopd check` lifts it."""

    since: datetime
    run: str = ""
    loop: str = ""
    message: str = ""
    escalation: str = ""  # the run id of the escalation that stands for it


class LoginFile(Record):
    profiles: dict[str, LoginHold] = {}


class BudgetMarks(Record):
    announced: dict[str, str] = {}  # scope ("home", "loop:NAME") -> the day announced


def _quota_path(store: StateStore) -> Path:
    return store.root / "quota.toml"


def _read(store: StateStore, path: Path, model: type[M]) -> M:
    try:
        return read_model(path, model)
    except FileNotFoundError:
        return model()
    except UnreadableFile as exc:
        store.report_unreadable(exc)
        return model()


@contextmanager
def _locked(store: StateStore) -> Iterator[None]:
    """One writer of quota.toml at a time, across processes (waits for the other)."""
    path = ensure_dir(store.root / "locks") / "quota.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def load_quota(store: StateStore) -> QuotaFile:
    """Every profile's hold; empty when none was written or the file is unreadable (reported)."""
    return _read(store, _quota_path(store), QuotaFile)


def hold_profile(store: StateStore, profile: str, hold: QuotaHold) -> None:
    """Hold `profile`'s new runs until `hold.resume_at` (a later hold already there is kept)."""
    with _locked(store):
        current = load_quota(store)
        kept = current.profiles.get(profile)
        if kept is not None and kept.resume_at >= hold.resume_at:
            return
        current.profiles[profile] = hold
        write_atomic(_quota_path(store), dump_toml(current))


def _logins_path(store: StateStore) -> Path:
    return store.root / "logins.toml"


def load_logins(store: StateStore) -> LoginFile:
    """Every profile held for its refused login; empty when none (or unreadable, reported)."""
    return _read(store, _logins_path(store), LoginFile)


def hold_login(store: StateStore, profile: str, hold: LoginHold) -> None:
    """Hold `profile`'s new runs until its login works again (a hold already there is kept)."""
    with _locked(store):
        current = load_logins(store)
        if profile in current.profiles:
            return
        current.profiles[profile] = hold
        write_atomic(_logins_path(store), dump_toml(current))


def lift_login(store: StateStore, profile: str) -> LoginHold | None:
    """`profile`'s login works again: its runs go on. Returns the hold lifted, if any."""
    with _locked(store):
        current = load_logins(store)
        hold = current.profiles.pop(profile, None)
        if hold is not None:
            write_atomic(_logins_path(store), dump_toml(current))
        return hold


def load_budget_marks(store: StateStore) -> BudgetMarks:
    return _read(store, store.root / "budget.toml", BudgetMarks)


def save_budget_marks(store: StateStore, marks: BudgetMarks) -> None:
    write_atomic(store.root / "budget.toml", dump_toml(marks))
