"""The trigger evaluator's cache: `trigger_matches` answers by (task, rule id, rule version).

In memory for one process, or kept in a JSON file (`state/cache/trigger-matches.json`) that
runs, `loopd rules match` and `loopd replay` share: replay reads the semantic answers given
to recorded runs' tasks from it and makes no model call of its own. A write merges what
another process wrote since this one read the file, so two writers lose nothing but a race.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

from daemon.redact import redact
from daemon.regularfile import STATE_MAX, read_regular
from daemon.rules.rulefile import Rule
from daemon.state.atomic import write_atomic


def task_key(task_text: str, loop: str, paths: list[str]) -> str:
    """The cache's key of a task: its text (whitespace normalized), its loop, its paths."""
    subject = " ".join(task_text.split()) + "\n" + loop + "\n" + "\n".join(sorted(paths))
    return hashlib.sha256(subject.encode("utf-8")).hexdigest()[:24]


class JudgeCache:
    """`trigger_matches` answers by (task, rule id, rule version); optionally kept in a file."""

    def __init__(self, path: Path | None = None, max_tasks: int = 2000) -> None:
        self.path = path
        self.max_tasks = max_tasks
        self._tasks: dict[str, dict[str, bool]] = {}
        self._vectors: dict[tuple[str, str], list[float]] = {}
        self._loaded = path is None
        self._lock = threading.Lock()

    def _read(self) -> dict[str, dict[str, bool]]:
        if self.path is None:
            return {}
        try:
            raw = read_regular(self.path, cap=STATE_MAX)
            data = json.loads(raw.decode("utf-8"))
            return {k: dict(v) for k, v in data.get("tasks", {}).items()}
        except (OSError, ValueError, AttributeError, TypeError):
            return {}

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            self._tasks = self._read()

    def get(self, task: str, rule: Rule) -> bool | None:
        with self._lock:
            self._load()
            return self._tasks.get(task, {}).get(f"{rule.id}@{rule.version}")

    def put(self, task: str, answers: dict[Rule, bool] | list[tuple[Rule, bool]]) -> None:
        items = answers.items() if isinstance(answers, dict) else answers
        with self._lock:
            self._load()
            if self.path is not None:
                for key, entry in self._read().items():  # what another process wrote since
                    mine = self._tasks.setdefault(key, {})
                    for rule_key, matched in entry.items():
                        mine.setdefault(rule_key, matched)
            entry = self._tasks.pop(task, {})
            for rule, matched in items:
                entry[f"{rule.id}@{rule.version}"] = matched
            self._tasks[task] = entry  # most recent last
            while len(self._tasks) > self.max_tasks:
                self._tasks.pop(next(iter(self._tasks)))
            if self.path is not None:
                # The file under state/ keeps tasks redacted (a lookup of a task with a secret
                # then misses it and asks again); in memory they stay as asked.
                tasks = {redact(task): entry for task, entry in self._tasks.items()}
                write_atomic(self.path, json.dumps({"tasks": tasks}))

    def vector(self, rule: Rule) -> list[float] | None:
        return self._vectors.get((rule.id, rule.version))

    def put_vector(self, rule: Rule, vector: list[float]) -> None:
        self._vectors[(rule.id, rule.version)] = vector
