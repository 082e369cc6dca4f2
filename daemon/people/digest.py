"""What a run's attempt folders say to a person: the diff's files and the checks' last failure."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from daemon.excerpt import excerpt
from daemon.people.terminal import checks_word as checks_word  # its readers import it here
from daemon.people.terminal import clean
from daemon.redact import redact
from daemon.state.records import AttemptRecord, DiffStat, FileChange, RunRecord
from daemon.state.store import StateStore

CHECKS_EXCERPT = 6_000  # characters of a failing checks.log shown to a person
CHECKS_READ = 16_000_000  # bytes of checks.log read for it: its two ends past that
LAST_MESSAGE_CHARS = 2_000  # characters of the agent's last message an escalation quotes


@dataclass(frozen=True)
class LastMessage:
    """The agent's last message in a run: the attempt it ended, and its words as shown."""

    attempt: int
    text: str


def last_message(run: RunRecord, cap: int = LAST_MESSAGE_CHARS) -> LastMessage | None:
    """The agent's last message (the final text of the last attempt that has one), redacted,
    without terminal sequences, its end kept within `cap` characters; None when it said
    nothing."""
    for attempt in reversed(run.attempts):
        text = clean(redact(attempt.summary)).strip()
        if text:
            if len(text) > cap:
                text = "[...] " + text[-cap:].lstrip()
            return LastMessage(attempt.n, text)
    return None


def _unquote_path(text: str) -> str:
    # git quotes unusual paths C-style; a person only needs to recognise them.
    if text.startswith('"') and text.endswith('"'):
        return text[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
    return text


def diff_stat(lines: Iterable[str]) -> DiffStat:
    """Files changed with +/- counts, read from the lines of a `git diff` patch.

    Only for attempts recorded before loopd kept `diffstat.json`; the lines are streamed.
    """
    stat = DiffStat()
    current: FileChange | None = None
    in_hunk = False
    for line in lines:
        line = line.rstrip("\n")
        if line.startswith("diff --git "):
            rest = line[len("diff --git ") :]
            # "a/PATH b/PATH": the b side is the new name; split on the middle " b/".
            cut = rest.rfind(" b/")
            path = rest[cut + 3 :] if cut >= 0 else rest
            current = FileChange(path=_unquote_path(path.strip()))
            stat.files.append(current)
            in_hunk = False
            continue
        if current is None:
            continue
        if line.startswith("@@"):
            in_hunk = True
            continue
        if not in_hunk:
            if line.startswith("new file mode"):
                current.status = "added"
            elif line.startswith("deleted file mode"):
                current.status = "deleted"
            elif line.startswith("rename to "):
                current.status = "renamed"
                current.path = _unquote_path(line[len("rename to ") :])
            elif line.startswith("Binary files ") or line.startswith("GIT binary patch"):
                current.binary = True
            continue
        if line.startswith("+"):
            current.added += 1
        elif line.startswith("-"):
            current.removed += 1
        elif line.startswith("GIT binary patch"):
            current.binary = True
    stat.total_files = len(stat.files)
    stat.added = sum(c.added for c in stat.files)
    stat.removed = sum(c.removed for c in stat.files)
    return stat


def format_stat(stat: DiffStat, limit: int = 30) -> list[str]:
    """`git diff --stat`-like lines with a total; long lists are cut with a count."""
    lines = [c.stat() for c in stat.files[:limit]]
    total = max(stat.total_files, len(stat.files))
    if total > min(limit, len(stat.files)):
        lines.append(f"... and {total - min(limit, len(stat.files))} more files")
    files = "1 file" if total == 1 else f"{total} files"
    lines.append(f"{files} changed, +{stat.added} -{stat.removed}")
    if stat.patch_capped:
        lines.append(f"(diff.patch was capped at {stat.patch_bytes} bytes)")
    return lines


@dataclass
class LastDiff:
    """The most recent attempt that left a diff."""

    attempt: int
    stat: DiffStat


def attempt_diffstat(folder: Path) -> DiffStat | None:
    """The attempt's counts: `diffstat.json`, else (older attempts) its streamed diff.patch."""
    try:
        return DiffStat.model_validate_json((folder / "diffstat.json").read_bytes())
    except FileNotFoundError:
        pass
    except (OSError, ValueError):
        return None
    try:
        with (folder / "diff.patch").open(encoding="utf-8", errors="replace") as fh:
            return diff_stat(fh)
    except OSError:
        return None


def last_diff(store: StateStore, run: RunRecord) -> LastDiff | None:
    """The diff of the last attempt that changed something."""
    for attempt in reversed(run.attempts):
        stat = attempt_diffstat(store.run_dir(run.id) / f"attempt-{attempt.n}")
        if stat is not None and (stat.total_files or stat.files):
            return LastDiff(attempt=attempt.n, stat=stat)
    return None


@dataclass
class ChecksFailure:
    """The checks' output of the last attempt whose checks failed."""

    attempt: int
    tail: str


def last_checks_failure(store: StateStore, run: RunRecord) -> ChecksFailure | None:
    """checks.log of the last attempt whose checks failed, as an excerpt (daemon/excerpt.py:
    the lines naming failures, the first failure, the end), within CHECKS_EXCERPT."""
    for attempt in reversed(run.attempts):
        if attempt.checks_passed is False:
            log = store.run_dir(run.id) / f"attempt-{attempt.n}" / "checks.log"
            text = excerpt(_read_ends(log, CHECKS_READ), CHECKS_EXCERPT).rstrip("\n")
            return ChecksFailure(attempt=attempt.n, tail=redact(text))
    return None


def _read_ends(path: Path, most: int) -> str:
    """A file's text; past `most` bytes, its first and last halves of that; '' when absent."""
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(0)
            if size <= most:
                return fh.read().decode("utf-8", "replace")
            head = fh.read(most // 2)
            fh.seek(size - most // 2)
            tail = fh.read()
    except OSError:
        return ""
    cut = f"\n[... {size - len(head) - len(tail)} bytes cut ...]\n"
    return head.decode("utf-8", "replace") + cut + tail.decode("utf-8", "replace")


def best_score(attempts: list[AttemptRecord]) -> int | None:
    scores = [a.score for a in attempts if a.score is not None]
    return max(scores) if scores else None


def one_line(text: str, limit: int = 160) -> str:
    """Text squeezed onto one line for tables and messages."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
