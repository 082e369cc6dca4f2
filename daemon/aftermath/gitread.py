"""The git reads the aftermath needs: later commits on a file list, patch-ids, line hashes."""

from __future__ import annotations

import hashlib
import re
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from daemon.git.safe import GIT_IDENTITY, Git, GitError

MAX_RENAMES = 8  # generations of renames followed in one look (a rename of a rename...)
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
    renames: dict[str, str] = field(default_factory=dict)  # old path: new path

    def paths(self) -> set[str]:
        """Every path it touches, a renamed file under both its names."""
        return {*self.numstat, *self.renames}

    @property
    def loopds(self) -> bool:
        return self.email == GIT_IDENTITY[1]

    def reverted(self) -> list[str]:
        """The commits its message says it reverts."""
        return REVERTS.findall(self.body)


def log(git: Git, rev_range: list[str], files: list[str] | None) -> list[Commit]:
    """The commits of `rev_range` (oldest first, merges left out) that touch `files` (None:
    every commit of the range), each with all the files it touches (`--full-diff`, so that a
    rename of one of `files` is seen as one: `Commit.renames`)."""
    if files is not None and not files:
        return []
    fmt = "%x01%H%x00%an%x00%ae%x00%cI%x00%s%x00%b%x00"
    text = git.out(
        "log", "--no-merges", "--reverse", "-M", "--full-diff", "-z", "--numstat",
        f"--format={fmt}", *rev_range, "--", *(files or []),
    )  # fmt: skip
    commits = []
    for chunk in text.split(_REC)[1:]:
        parts = chunk.split(_SEP, 6)
        if len(parts) < 7:
            continue
        sha, author, email, date, subject, body, stat = parts
        commit = Commit(sha, author, email, datetime.fromisoformat(date), subject, body)
        _stat(commit, stat)
        commits.append(commit)
    return commits


def log_following(git: Git, rev_range: str, files: list[str]) -> list[Commit]:
    """`log` of `files` over `rev_range`, followed through renames: a commit that renames one
    of them adds the new name, and the range is read again with it (one `git log` more per
    generation of renames, none when nothing was renamed)."""
    names = list(files)
    for _ in range(MAX_RENAMES):
        commits = log(git, [rev_range], names)
        new = [n for c in commits for o, n in c.renames.items() if o in names and n not in names]
        if not new:
            return commits
        names += sorted(set(new))
    return commits


def range_log(git: Git, since: str, tip: str) -> list[Commit] | None:
    """The non-merge commits of `since..tip` (oldest first) with every file each touches, or
    None when `since` is not an ancestor of `tip`: one `git log`, its `--boundary` telling
    which (`since` is a boundary commit exactly when a commit of the range has it as parent).
    """
    fmt = "%x01%m%x00%P%x00%H%x00%an%x00%ae%x00%cI%x00%s%x00%b%x00"
    text = git.out(
        "log", "--boundary", "--reverse", "-M", "-z", "--numstat", f"--format={fmt}",
        f"{since}..{tip}",
    )  # fmt: skip
    commits, ancestor = [], False
    for chunk in text.split(_REC)[1:]:
        parts = chunk.split(_SEP, 8)
        if len(parts) < 9:
            continue
        mark, parents, sha, author, email, date, subject, body, stat = parts
        if mark == "-":
            ancestor = ancestor or sha == since or since.startswith(sha)
            continue
        if len(parents.split()) > 1:
            continue  # a merge: its commits are in the range themselves
        commit = Commit(sha, author, email, datetime.fromisoformat(date), subject, body)
        _stat(commit, stat)
        commits.append(commit)
    return commits if ancestor else None


@dataclass
class History:
    """A target's history read once, when it is a single line of commits (no merge): what
    the first look at many runs shares instead of a `git log` of each run's own."""

    commits: list[Commit]
    position: dict[str, int]  # commit: its index in `commits`
    by_path: dict[str, list[int]]  # path: the indexes of the commits touching it, in order

    def after(self, commit: str, paths: list[str]) -> list[Commit] | None:
        """The commits after `commit` that touch `paths`, oldest first; None when `commit`
        is not in it, or one of them renames (its log of its own then follows the name)."""
        start = self.position.get(commit)
        if start is None:
            return None
        found = sorted({i for p in paths for i in self.by_path.get(p, ()) if i > start})
        touching = [self.commits[i] for i in found]
        return None if any(c.renames for c in touching) else touching


def history(git: Git, tip: str) -> History | None:
    """Every commit of `tip` with the files each touches (one `git log`), or None when its
    history is not a single line (a merge in it: each run's own log is read instead)."""
    fmt = "%x01%P%x00%H%x00%an%x00%ae%x00%cI%x00%s%x00%b%x00"
    text = git.out("log", "--reverse", "-M", "-z", "--numstat", f"--format={fmt}", tip)
    commits: list[Commit] = []
    by_path: dict[str, list[int]] = {}
    for chunk in text.split(_REC)[1:]:
        parts = chunk.split(_SEP, 7)
        if len(parts) < 8:
            continue
        parents, sha, author, email, date, subject, body, stat = parts
        previous = [commits[-1].commit] if commits else []
        if parents.split() != previous:
            return None  # a merge, or a second root: not one line
        commit = Commit(sha, author, email, datetime.fromisoformat(date), subject, body)
        _stat(commit, stat)
        for path in commit.paths():
            by_path.setdefault(path, []).append(len(commits))
        commits.append(commit)
    position = {c.commit: i for i, c in enumerate(commits)}
    return History(commits, position, by_path)


def _stat(commit: Commit, text: str) -> None:
    """`--numstat -z` of a commit into its numstat (a renamed file under its new name) and
    its renames: `ADDED\tREMOVED\tPATH` each, or `ADDED\tREMOVED\t` then OLD and NEW."""
    rows = text.lstrip("\0\n").split(_SEP)
    i = 0
    while i < len(rows):
        row = rows[i].lstrip("\n")
        i += 1
        added, removed, path = (row.split("\t", 2) + ["", "", ""])[:3]
        if not row or not added:
            continue
        if not path and i + 1 < len(rows):  # a rename: the old and the new name follow
            old, path = rows[i], rows[i + 1]
            i += 2
            commit.renames[old] = path
        if path:
            commit.numstat[path] = (_int(added), _int(removed))


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


class Blobs:
    """One `git cat-file --batch` kept open for a sweep: the files of many runs read at the
    new tip through one process, not one each. Asked and answered a file at a time, so
    neither pipe fills while the other waits."""

    def __init__(self, git: Git) -> None:
        self.git = git
        self._proc: subprocess.Popen[bytes] | None = None

    def read(self, spec: str) -> bytes | None:
        """The blob `REV:PATH` names; None when there is none."""
        if "\n" in spec:
            return None  # cat-file reads a line a name
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(spec.encode() + b"\n")
        proc.stdin.flush()
        header = proc.stdout.readline()
        if not header:
            self.close()
            raise GitError(["cat-file", "--batch"], -1, "git cat-file ended early")
        parts = header.split()
        if len(parts) != 3 or parts[1] not in _TYPES or not parts[2].isdigit():
            return None  # "SPEC missing" or "SPEC ambiguous"
        body = proc.stdout.read(int(parts[2]) + 1)
        return body[:-1] if parts[1] == b"blob" else None

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            self._proc = subprocess.Popen(
                self.git.argv(["cat-file", "--batch"]),
                cwd=self.git.cwd,
                env=self.git.env(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        return self._proc

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        assert proc.stdin is not None
        try:
            proc.stdin.close()
            proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


_TYPES = (b"blob", b"tree", b"commit", b"tag")


def kept_in(
    git: Git, tip: str, lines: dict[str, list[str]], blobs: Blobs | None = None
) -> dict[str, int]:
    """How many of each file's landed lines the file at `tip` still holds (as a multiset);
    `blobs`: the sweep's open cat-file, else one for this call."""
    if not lines:
        return {}
    reader = blobs or Blobs(git)
    kept = {}
    try:
        for name, want_lines in lines.items():
            body = reader.read(f"{tip}:{name}")
            if body is None:
                kept[name] = 0
                continue
            text = body.decode("utf-8", "replace")
            have = Counter(line_hash(row) for row in text.splitlines() if row.strip())
            want = Counter(want_lines)
            kept[name] = sum(min(n, have[h]) for h, n in want.items())
    finally:
        if blobs is None:
            reader.close()
    return kept
