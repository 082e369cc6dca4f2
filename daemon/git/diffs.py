"""An attempt's diff: `diffstat.json` (files and +/- counts) and `diff.patch`, streamed and capped.

A committed artefact can be hundreds of megabytes: the patch is read from git line by line,
redacted line by line and written until the cap, where a marker says how to see the rest.
The counts come from `git diff --numstat`, so what people read never needs the whole patch.
"""

from __future__ import annotations

from pathlib import Path

from daemon.git.safe import Git
from daemon.redact import Redactor
from daemon.state.atomic import atomic_writer, write_atomic
from daemon.state.records import DiffStat, FileChange

PATCH_CAP = 20_000_000  # bytes of diff.patch; the counts in diffstat.json cover the rest
FILES_KEPT = 1000  # files listed in diffstat.json; the totals count them all
PATCH = "diff.patch"
DIFFSTAT = "diffstat.json"
_DIFF = ("diff", "--no-ext-diff", "--no-textconv", "-M")
_STATUS = {"A": "added", "D": "deleted", "R": "renamed", "C": "added", "M": "modified"}


def _fields(git: Git, *args: str) -> list[str]:
    out = git.run(*_DIFF, "-z", *args).stdout.decode("utf-8", "surrogateescape")
    return out.split("\0")


def numstat(git: Git, base: str, head: str) -> DiffStat:
    """The files that differ between two commits, with lines added and removed."""
    statuses: dict[str, str] = {}
    fields = _fields(git, "--name-status", base, head)
    i = 0
    while i < len(fields) and fields[i]:
        code = fields[i][:1]
        if code in ("R", "C"):
            statuses[fields[i + 2]] = _STATUS[code]
            i += 3
        else:
            statuses[fields[i + 1]] = _STATUS.get(code, "modified")
            i += 2
    stat = DiffStat()
    fields = _fields(git, "--numstat", base, head)
    i = 0
    while i < len(fields) and fields[i]:
        added, removed, path = fields[i].split("\t", 2)
        i += 1
        if not path:  # a rename: "A\tR\t" then the old and the new path
            path = fields[i + 1]
            i += 2
        binary = added == "-"
        change = FileChange(
            path=path.encode("utf-8", "surrogateescape").decode("utf-8", "replace"),
            added=0 if binary else int(added),
            removed=0 if binary else int(removed),
            binary=binary,
            status=statuses.get(path, "modified"),
        )
        stat.total_files += 1
        stat.added += change.added
        stat.removed += change.removed
        if len(stat.files) < FILES_KEPT:
            stat.files.append(change)
    return stat


def cap_marker(cap: int, base: str, head: str) -> str:
    return (
        f"\n[... diff.patch capped at {cap} bytes; the whole diff: "
        f"git diff {base[:12]} {head[:12]} ...]\n"
    )


def write_patch(git: Git, base: str, head: str, path: Path, cap: int = PATCH_CAP) -> bool:
    """Stream `git diff --binary BASE HEAD` into `path`, redacted; True when it was capped."""
    capped = False
    with atomic_writer(path) as out:
        written = 0
        redactor = Redactor()
        lines = git.stream(*_DIFF, "--binary", base, head)
        try:
            for raw in lines:
                text = raw.decode("utf-8", "replace")
                end = "\n" if text.endswith("\n") else ""
                data = (redactor.line(text.removesuffix("\n")) + end).encode("utf-8")
                if written + len(data) > cap:
                    capped = True
                    break
                out.write(data)
                written += len(data)
        finally:
            lines.close()  # kills git when the cap stopped the reading
        if capped:
            out.write(cap_marker(cap, base, head).encode("utf-8"))
    return capped


def record_diff(git: Git, base: str, head: str, folder: Path, cap: int = PATCH_CAP) -> DiffStat:
    """Write the attempt's `diffstat.json` and `diff.patch`; returns the counts."""
    stat = numstat(git, base, head)
    stat.patch_capped = write_patch(git, base, head, folder / PATCH, cap)
    stat.patch_bytes = (folder / PATCH).stat().st_size
    write_atomic(folder / DIFFSTAT, stat.model_dump_json(indent=1))
    return stat
