"""Run records made comparable across engines: the same scenario's runs, field by field.

What is the machine's or the moment's (ids, times, paths, process ids, the engine's own
plumbing) is left out or replaced by a label; what the run's lifecycle decided (outcome,
cause, reason, landing, what it built on, attempts and their verdicts, the order of its
finishing steps) must be equal on both engines.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from tests.machines import Machine

# Where the run's processes and files were, and when: the machine's, not the lifecycle's.
MACHINE_FIELDS = {
    "started", "finished", "ts", "refs_at", "judging_since", "resume_at", "pid",
    "agent_pids", "pid_marks", "worktree", "own_git_dir", "repo_git_dir", "agent_git_dir",
    "repo",
    "refs_before", "exposure", "session_id", "inbox", "created", "until", "reset_at",
    # The sandbox is the machine's that runs the attempt: on Temporal a worker's, unknown to
    # the home until an attempt reports it (a refused run has none there).
    "sandbox",
    # Digests of the base's failing check output, which holds the machine's timings (pytest's
    # "in 0.03s") and folders: compared within one run's machine, never across engines.
    "base_failures",
}  # fmt: skip
# Seconds measured by the machine's clock: compared as whether there were any.
DURATIONS = {"waited"}
HASH = re.compile(r"\b[0-9a-f]{40}\b")
SHORT = re.compile(r"\b[0-9a-f]{12}\b")


class Labels:
    """Run ids and commits replaced by labels in the order they first appear."""

    def __init__(self, machine: Machine, run_ids: list[str]) -> None:
        self.root = str(machine.root)
        self.runs = {run_id: f"RUN{i + 1}" for i, run_id in enumerate(run_ids)}
        self.commits: dict[str, str] = {}

    def commit(self, sha: str) -> str:
        for full, label in self.commits.items():
            if full.startswith(sha):
                return label
        self.commits[sha] = label = f"C{len(self.commits) + 1}"
        return label

    def text(self, value: str) -> str:
        for run_id, label in self.runs.items():
            value = value.replace(run_id, label)
        value = value.replace(self.root, "ROOT")
        value = HASH.sub(lambda m: self.commit(m.group()), value)
        return SHORT.sub(lambda m: self.commit(m.group()), value)


def comparable(machine: Machine) -> list[dict[str, Any]]:
    """The machine's runs, oldest first, as the lifecycle decided them."""
    runs = machine.runs()
    labels = Labels(machine, [r["id"] for r in runs])
    return [_value(run, labels) for run in runs]


def _value(value: Any, labels: Labels) -> Any:
    if isinstance(value, dict):
        return {
            k: bool(v) if k in DURATIONS else _value(v, labels)
            for k, v in value.items()
            if k not in MACHINE_FIELDS
        }
    if isinstance(value, list):
        return [_value(v, labels) for v in value]
    if isinstance(value, str):
        return labels.text(value)
    if isinstance(value, datetime):
        return "TIME"
    return value


def differences(left: Any, right: Any, at: str = "") -> list[str]:
    """Where two comparable values differ, one line per field."""
    if isinstance(left, dict) and isinstance(right, dict):
        out = []
        for key in sorted(set(left) | set(right)):
            out += differences(left.get(key), right.get(key), f"{at}.{key}" if at else key)
        return out
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        out = []
        for i, (a, b) in enumerate(zip(left, right, strict=True)):
            out += differences(a, b, f"{at}[{i}]")
        return out
    return [] if left == right else [f"{at}: {left!r} != {right!r}"]
