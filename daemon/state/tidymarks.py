"""`state/maintenance.toml`: when loopd last ran `git gc --auto` in each repository, so that
it runs at most once a day per repository however often loopd restarts."""

from __future__ import annotations

from datetime import datetime

from daemon.state.atomic import write_atomic
from daemon.state.records import Record
from daemon.state.store import StateStore, UnreadableFile, dump_toml, read_model


class MaintenanceMarks(Record):
    repos: dict[str, datetime] = {}  # a repository's common git directory -> the last run


def load_maintenance(store: StateStore) -> MaintenanceMarks:
    try:
        return read_model(store.root / "maintenance.toml", MaintenanceMarks)
    except FileNotFoundError:
        return MaintenanceMarks()
    except UnreadableFile as exc:
        store.report_unreadable(exc)
        return MaintenanceMarks()


def save_maintenance(store: StateStore, marks: MaintenanceMarks) -> None:
    write_atomic(store.root / "maintenance.toml", dump_toml(marks))
