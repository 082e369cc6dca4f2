"""`state/ref-ledger.jsonl`: every ref loopd itself moves in a user's repository.

The ref guard (git/guards.py) fails an attempt for any ref of the user's repository that
moved while the agent worked, unless loopd moved it: fetching a run's branch in, keeping an
agent's commits, pruning old branches, landing. Those updates are written here first, one
JSON line each (several processes append: the daemon, `loopd once`, housekeeping), and the
guard reads the entries made since its snapshot. The agent never sees the home, so it cannot
write an explanation for its own move.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from daemon.state.atomic import FILE_MODE, ensure_dir, write_atomic

LEDGER_NAME = "ref-ledger.jsonl"
# An entry is written just before its update: a snapshot taken between the two would miss
# the entry without this margin.
MARGIN = timedelta(minutes=2)
KEEP = timedelta(days=7)  # entries older than this are dropped by `trim`


class LedgerEntry(BaseModel):
    """One ref update made by loopd; `new` is "" when the ref was deleted."""

    model_config = ConfigDict(extra="ignore")

    ts: datetime
    repo: str  # the repository's common git directory, resolved
    ref: str
    old: str = ""
    new: str = ""
    why: str = ""
    run: str = ""


class RefLedger:
    """Appends loopd's own ref updates; answers which moves since a moment loopd made."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _locked(self) -> int:
        """A descriptor of the ledger file as the path names it now, under an exclusive flock."""
        ensure_dir(self.path.parent)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, FILE_MODE)
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return fd
            os.close(fd)  # trimmed meanwhile: follow to the new file

    def record(self, entries: Iterable[LedgerEntry]) -> None:
        """Append `entries` (before the updates they describe are made)."""
        data = "".join(entry.model_dump_json() + "\n" for entry in entries).encode("utf-8")
        if not data:
            return
        fd = self._locked()
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def entries(self, repo: str, since: datetime | None = None) -> list[LedgerEntry]:
        """The entries for `repo` made at or after `since` less the margin, oldest first."""
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return []
        cutoff = since - MARGIN if since is not None else None
        out = []
        for line in text.splitlines():
            try:
                entry = LedgerEntry.model_validate(json.loads(line))
            except ValueError:
                continue  # a torn line from a crash
            if entry.repo != repo or (cutoff is not None and entry.ts < cutoff):
                continue
            out.append(entry)
        return out

    def explains(self, repo: str, since: datetime | None) -> dict[str, set[str]]:
        """{ref: the values loopd set it to since `since`} ("" for a deletion)."""
        out: dict[str, set[str]] = {}
        for entry in self.entries(repo, since):
            out.setdefault(entry.ref, set()).add(entry.new)
        return out

    def trim(self, now: datetime, keep: timedelta = KEEP) -> int:
        """Drop entries older than `keep`; returns how many were dropped."""
        if not self.path.exists():
            return 0
        fd = self._locked()
        try:
            with open(self.path, encoding="utf-8", errors="replace") as fh:
                lines = fh.read().splitlines()
            kept = []
            for line in lines:
                try:
                    entry = LedgerEntry.model_validate(json.loads(line))
                except ValueError:
                    continue
                if entry.ts >= now - keep:
                    kept.append(line + "\n")
            dropped = len(lines) - len(kept)
            if dropped:
                write_atomic(self.path, "".join(kept))  # appenders waiting follow the new file
            return dropped
        finally:
            os.close(fd)


def ledger_of(state_root: Path) -> RefLedger:
    """The ledger of the home whose state folder is `state_root`."""
    return RefLedger(state_root / LEDGER_NAME)
