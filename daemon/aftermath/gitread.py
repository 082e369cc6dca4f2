"""The git reads the aftermath needs: later commits on a file list, patch-ids, line hashes."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from daemon.git.safe import GIT_IDENTITY, Git

MAX_LINES = 20_000  # lines of a run kept as hashes: past this, the rest are not followed
REVERTS = re.compile(r"This reverts commit ([0-9a-f]{7,64})")
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
_SEP, _REC = "\x00", "\x01"


def line_hash(text: str) -> str:
    """A short hash of a line, its trailing spaces ignored."""
    return hashlib.blake2b(text.rstrip().encode("utf-8", "replace"), digest_size=6).hexdigest()


@dataclass
class Commit:
    """A commit read from `git log`: who, when, what it says, what it did to each file."""

    commit: str
    author: str
    email: str
    date: datetime
    subject: str
    body: str
    numstat: dict[str, tuple[int, int]] = field(default_factory=dict)  # path: (added, removed)

    @property
    def loopds(self) -> bool:
        return self.email == GIT_IDENTITY[1]

    def reverted(self) -> list[str]:
        """The commits its message says it reverts."""
        return REVERTS.findall(self.body)


def log(git: Git, rev_range: list[str], files: list[str]) -> list[Commit]:
    """The commits of `rev_range` (oldest first, merges left out) that touch `files`."""
    if not files:
        return []
    fmt = "%x01%H%x00%an%x00%ae%x00%cI%x00%s%x00%b%x00"
    text = git.out(
        "log", "--no-merges", "--reverse", "--no-renames", "--numstat", f"--format={fmt}",
        *rev_range, "--", *files,
    )  # fmt: skip
    commits = []
    for chunk in text.split(_REC)[1:]:
        parts = chunk.split(_SEP)
        if len(parts) < 7:
            continue
        sha, author, email, date, subject, body, stat = parts[:7]
        commit = Commit(sha, author, email, datetime.fromisoformat(date), subject, body)
        for row in stat.strip().splitlines():
            added, removed, path = (row.split("\t", 2) + ["", "", ""])[:3]
            if path:
                commit.numstat[path] = (_int(added), _int(removed))
        commits.append(commit)
    return commits


def _int(text: str) -> int:
    return int(text) if text.isdigit() else 0  # "-" for a binary file


def patch_ids(git: Git, patch: bytes) -> dict[str, str]:
    """`git patch-id --stable` of a patch stream: commit (or zeros) to its patch-id."""
    if not patch.strip():
        return {}
    out = git.run("patch-id", "--stable", input=patch).stdout.decode("ascii", "replace")
    found = {}
    for line in out.splitlines():
        pid, _, commit = line.partition(" ")
        found[commit.strip()] = pid
    return found


def commit_patch_ids(
    git: Git, rev_args: list[str], files: list[str] | None = None
) -> dict[str, str]:
    """The patch-id of each non-merge commit `rev_args` name (their diffs in `files` only)."""
    args = [
        "log",
        "-p",
        "--no-ext-diff",
        "--no-textconv",
        "--no-merges",
        "--no-renames",
        "--format=commit %H",
        *rev_args,
    ]
    if files is not None:
        args += ["--", *files]
    return patch_ids(git, git.run(*args).stdout)


def diff_patch_id(git: Git, old: str, new: str) -> str:
    """The patch-id of the diff from `old` to `new`."""
    patch = git.run(
        "diff", "--no-ext-diff", "--no-textconv", "--no-renames", "--full-index", old, new
    ).stdout
    return next(iter(patch_ids(git, patch).values()), "")


def parent_or_empty(git: Git, commit: str) -> str:
    parent = git.out("rev-parse", "-q", "--verify", f"{commit}^", check=False)
    return parent or EMPTY_TREE


def added_lines(git: Git, old: str, new: str) -> dict[str, list[str]]:
    """The non-blank lines the diff from `old` to `new` adds, per file, as hashes."""
    text = git.run(
        "diff", "--no-ext-diff", "--no-textconv", "--no-renames", "-U0", old, new
    ).stdout.decode("utf-8", "replace")
    lines: dict[str, list[str]] = {}
    current, total = "", 0
    for row in text.splitlines():
        if row.startswith("+++ "):
            current = row[6:] if row.startswith("+++ b/") else ""
        elif row.startswith("+") and current and row[1:].strip() and total < MAX_LINES:
            lines.setdefault(current, []).append(line_hash(row[1:]))
            total += 1
    return lines


def kept_in(git: Git, tip: str, lines: dict[str, list[str]]) -> dict[str, int]:
    """How many of each file's landed lines the file at `tip` still holds (as a multiset)."""
    if not lines:
        return {}
    names = list(lines)
    request = "".join(f"{tip}:{name}\n" for name in names).encode()
    out = git.run("cat-file", "--batch", input=request).stdout
    kept, at = {}, 0
    for name in names:
        end = out.index(b"\n", at)
        header = out[at:end].split()
        at = end + 1
        if len(header) < 3 or header[1] == b"missing":
            kept[name] = 0
            continue
        size = int(header[2])
        body = out[at : at + size].decode("utf-8", "replace")
        at += size + 1
        have = Counter(line_hash(row) for row in body.splitlines() if row.strip())
        want = Counter(lines[name])
        kept[name] = sum(min(n, have[h]) for h, n in want.items())
    return kept
