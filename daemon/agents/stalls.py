"""Noticing a stalled agent: silence (no output, no file change) or one tool call repeated.

File changes are found by a lazy mtime scan: only when the output has been silent for
`stall_after` is the tree walked (`.git` skipped, symlinks not followed) for an entry whose
mtime or ctime is newer than the last activity, so a quiet tree costs one walk per
`stall_after` and a talking agent costs none.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Literal

from daemon.redact import redact

StallKind = Literal["silence", "repeated_tool_call"]

REPEAT_LIMIT = 3
ARGUMENTS_KEPT = 4096  # characters of a call's JSON arguments kept in records


def newest_change(tree: Path, since: float) -> float | None:
    """The mtime/ctime of a file or folder under `tree` newer than `since`, or None.

    Stops at the first one found; `.git` is skipped, symlinks are not followed.
    """
    stack = [tree]
    while stack:
        folder = stack.pop()
        try:
            entries = os.scandir(folder)
        except OSError:
            continue
        with entries:
            for entry in entries:
                if entry.name == ".git":
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                changed = max(st.st_mtime, st.st_ctime)
                if changed > since:
                    return changed
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
    return None


class StallWatcher:
    """The last activity of one process in `cwd`, and the tool calls it repeats."""

    def __init__(self, cwd: Path, stall_after: float | None, repeat_limit: int) -> None:
        self.cwd = cwd
        self.stall_after = stall_after if stall_after and stall_after > 0 else None
        self.repeat_limit = repeat_limit
        self.last_activity = time.monotonic()
        self.last_activity_wall = time.time()
        self.repeat_key: tuple[str, str] | None = None
        self.repeat_count = 0
        self.pending: StallKind | None = None  # a repeated call, acted on at the next check

    def activity(self) -> None:
        """The process printed something."""
        self.last_activity = time.monotonic()
        self.last_activity_wall = time.time()

    def deadline(self) -> float | None:
        """When (monotonic) silence becomes a stall, unless something happens before."""
        return None if self.stall_after is None else self.last_activity + self.stall_after

    def tool_call(self, tool: str, arguments: str) -> None:
        """A tool call with its JSON `arguments`; the `repeat_limit`-th same one in a row stalls."""
        if self.pending is not None:
            return  # the stall is decided; what it reports must not change (nor go unredacted)
        key = (tool, arguments)
        if key == self.repeat_key:
            self.repeat_count += 1
        else:
            self.repeat_key, self.repeat_count = key, 1
        if self.repeat_count >= self.repeat_limit and self.pending is None:
            self.pending = "repeated_tool_call"
            self.repeat_key = (tool, redact(arguments))

    def silent(self, now: float) -> bool:
        """Whether no output and no file change came for `stall_after` seconds until `now`."""
        deadline = self.deadline()
        if deadline is None or now < deadline:
            return False
        changed = newest_change(self.cwd, self.last_activity_wall)
        if changed is None:
            return True
        # Move the last activity to when the file changed, on the monotonic clock.
        wall_now = time.time()
        self.last_activity = now - max(0.0, wall_now - changed)
        self.last_activity_wall = changed
        return False

    def details(self, kind: StallKind) -> dict[str, Any]:
        """The fields of the transcript's `stall` record."""
        fields: dict[str, Any] = {"kind": kind}
        if kind == "silence":
            silent = round(time.monotonic() - self.last_activity, 3)
            fields["silent_seconds"] = silent
            fields["detail"] = f"no output and no file change for {silent:.0f}s"
        elif self.repeat_key is not None:
            fields["tool"] = self.repeat_key[0]
            fields["arguments"] = self.repeat_key[1][:ARGUMENTS_KEPT]
            fields["times"] = self.repeat_count
            fields["detail"] = f"{self.repeat_key[0]} repeated {self.repeat_count} times"
        return fields
