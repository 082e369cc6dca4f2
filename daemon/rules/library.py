"""The rule library `rules/`: one file per rule, its folder is its status, read on every call."""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from daemon.regularfile import CONFIG_MAX, NotRegular, read_regular
from daemon.rules.patterns import pattern_problem
from daemon.rules.rulefile import (
    LIVE,
    RULE_ID,
    STATUSES,
    Rule,
    RuleFileError,
    Status,
    dump_rule,
    make_id,
    parse_rule,
)
from daemon.state.atomic import fsync_dir, write_atomic
from daemon.state.events import EventLog
from daemon.state.eventtypes import Event

log = logging.getLogger("loopd.rules")
_RANK = {"rejected": 0, "retired": 0, "trial": 1, "active": 2}


@dataclass(frozen=True)
class StoredRule:
    """A rule as found on disk: its status is the folder it sits in."""

    rule: Rule
    status: Status
    path: Path
    # (pattern, why) for trigger patterns RE2 cannot run: they are skipped, with a warning.
    pattern_problems: tuple[tuple[str, str], ...] = ()


class RuleNotFound(KeyError):
    """No file holds a rule with this id."""


class RuleLibrary:
    """Reads `rules/STATUS/*.md` afresh on every call; moves files between status folders.

    Every call lists the folders and stats each file, so a file deleted, edited or moved by
    hand takes effect on the next call; only files whose (inode, size, mtime, ctime) did not
    change are served from the parse cache, which keeps 10,000 rules cheap to re-read.
    """

    def __init__(self, rules_dir: Path) -> None:
        self.rules_dir = rules_dir
        self.warnings: list[str] = []  # of the last scan: broken files, duplicate ids
        self._parsed: dict[Path, tuple[tuple[int, int, int, int], Rule | str, tuple]] = {}
        self._lock = threading.RLock()
        self.generation = 0  # rises whenever a file is parsed anew or disappears

    # reading ---------------------------------------------------------------------------
    def _read(self, path: Path, stat: os.stat_result) -> Rule | str:
        key = (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
        cached = self._parsed.get(path)
        if cached and cached[0] == key:
            return cached[1]
        self._parse(path, key)
        return self._parsed[path][1]

    def _problems(self, path: Path) -> tuple[tuple[str, str], ...]:
        cached = self._parsed.get(path)
        return cached[2] if cached else ()

    def _parse(self, path: Path, key: tuple[int, int, int, int]) -> None:
        self.generation += 1
        try:
            # The home bounds the links followed: a FIFO or /dev/zero here hung every run.
            data = read_regular(path, within=self.rules_dir.parent, cap=CONFIG_MAX)
            rule: Rule | str = parse_rule(data.decode("utf-8"))
            if isinstance(rule, Rule) and rule.id != path.stem:
                rule = (
                    f"id {rule.id!r} differs from the file name; rename the file to "
                    f"{rule.id}.md or set id = {path.stem!r}"
                )
        except (RuleFileError, UnicodeDecodeError) as exc:
            rule = str(exc)
        except NotRegular as exc:
            rule = exc.reason
        except OSError as exc:
            rule = f"cannot read: {exc.strerror}"
        problems: tuple[tuple[str, str], ...] = ()
        if isinstance(rule, str):
            log.warning("skipping rule file %s: %s", path, rule)
        else:
            found = ((p, pattern_problem(p)) for p in rule.trigger_patterns)
            problems = tuple((p, why) for p, why in found if why)
        self._parsed[path] = (key, rule, problems)

    def scan(self) -> list[StoredRule]:
        """Every readable rule in every folder; broken files are skipped with a warning."""
        with self._lock:
            found: dict[str, StoredRule] = {}
            warnings: list[str] = []
            seen: set[Path] = set()
            for status in STATUSES:
                folder = self.rules_dir / status
                try:
                    entries = sorted(os.scandir(folder), key=lambda e: e.name)
                except FileNotFoundError:
                    continue
                for entry in entries:
                    if entry.name.startswith(".") or not entry.name.endswith(".md"):
                        continue
                    path = Path(entry.path)
                    try:
                        stat = entry.stat()
                    except FileNotFoundError:
                        continue
                    seen.add(path)
                    rule = self._read(path, stat)
                    if isinstance(rule, str):
                        warnings.append(f"{path}: {rule}")
                        continue
                    problems = self._problems(path)
                    for pattern, why in problems:
                        warnings.append(
                            f"{path}: trigger pattern {pattern!r} is skipped: {why}; "
                            "rewrite it for RE2 (no lookarounds or backreferences)"
                        )
                    if rule.id in found:
                        warnings.append(
                            f"{path}: rule {rule.id} is also in {found[rule.id].path}; "
                            f"this copy is ignored, delete one of them"
                        )
                        continue
                    found[rule.id] = StoredRule(rule, status, path, problems)
            for gone in set(self._parsed) - seen:
                del self._parsed[gone]
                self.generation += 1
            self.warnings = warnings
            return list(found.values())

    def rules(self, statuses: tuple[Status, ...] = LIVE) -> list[StoredRule]:
        """The rules whose folder is one of `statuses` (trial and active by default)."""
        return [s for s in self.scan() if s.status in statuses]

    def get(self, rule_id: str) -> StoredRule:
        for stored in self.scan():
            if stored.rule.id == rule_id:
                return stored
        raise RuleNotFound(rule_id)

    def find(self, rule_id: str) -> StoredRule | None:
        try:
            return self.get(rule_id)
        except RuleNotFound:
            return None

    # writing ---------------------------------------------------------------------------
    def _next_number(self) -> int:
        highest = 0
        for status in STATUSES:
            folder = self.rules_dir / status
            for name in os.listdir(folder) if folder.is_dir() else []:
                match = RULE_ID.match(name.removesuffix(".md"))
                if match:
                    highest = max(highest, int(match.group(1)))
        return highest + 1

    def add(self, rule: Rule, status: Status) -> StoredRule:
        """File a new rule under `status`, giving it the next free id when it has none."""
        with self._lock:
            folder = self.rules_dir / status
            folder.mkdir(parents=True, exist_ok=True)
            named = RULE_ID.match(rule.id) if rule.id else None
            slug = named.group(2) if named else rule.rule
            for _ in range(1000):
                number = self._next_number()
                if not rule.id or self.find(rule.id) is not None:
                    rule = _updated(rule, {"id": make_id(number, slug)})
                path = folder / f"{rule.id}.md"
                if self._create_exclusive(path, dump_rule(rule)):
                    return StoredRule(rule, status, path)
            raise RuntimeError(f"could not allocate a rule id under {folder}")

    @staticmethod
    def _create_exclusive(path: Path, text: str) -> bool:
        """Write a new file atomically; False when the name is taken (another writer won)."""
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, path)  # fails when the name exists: no id is ever reused
            except FileExistsError:
                return False
            fsync_dir(path.parent)
            return True
        finally:
            Path(tmp).unlink(missing_ok=True)

    def save(self, stored: StoredRule, rule: Rule) -> StoredRule:
        """Rewrite a rule in place (counters, evidence, severity), atomically."""
        if rule.id != stored.rule.id:
            raise ValueError("save() keeps the id; use add() for a new rule")
        with self._lock:
            write_atomic(stored.path, dump_rule(rule))
            return StoredRule(rule, stored.status, stored.path)

    def move(
        self,
        rule_id: str,
        to: Status,
        events: EventLog | None,
        now: datetime,
        reason: str = "",
        loop: str | None = None,
        run: str | None = None,
        update: dict | None = None,
    ) -> StoredRule:
        """Move a rule to another status folder by an atomic rename; every move is an event."""
        with self._lock:
            stored = self.get(rule_id)
            changes = dict(update or {})
            if reason:
                changes["reason"] = reason
            if changes:
                stored = self.save(stored, _updated(stored.rule, changes))
            if stored.status == to:
                return stored
            folder = self.rules_dir / to
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / stored.path.name
            if target.exists():
                raise FileExistsError(f"{target} already exists; delete one of the two copies")
            os.rename(stored.path, target)
            fsync_dir(folder)
            fsync_dir(stored.path.parent)
            if events is not None:
                if to == "rejected":
                    kind = Event.RULE_REJECTED
                elif _RANK[to] > _RANK[stored.status]:
                    kind = Event.RULE_PROMOTED
                else:
                    kind = Event.RULE_DEMOTED
                fields = {
                    "rule": rule_id,
                    "kind": stored.rule.kind,
                    "from": stored.status,
                    "to": to,
                    "reason": reason,
                }
                events.append(kind, now, loop=loop, run=run, **fields)
            return StoredRule(stored.rule, to, target)


def _updated(rule: Rule, changes: dict) -> Rule:
    """A copy with `changes` applied and validated (model_copy alone skips validation)."""
    return Rule.model_validate({**rule.model_dump(), **changes})
