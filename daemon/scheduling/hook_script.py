"""Hook records become inbox triggers: what loopd's git hooks saw, matched to the loops.

loopd's hook wrappers (hooks.py) are plain sh that start no Python: each writes a record of
what moved into every hooked home's `state/inbox/` as `hook-PID-N.hook` (in place, its last
line `end` once it is whole) and returns to git. The daemon's intake (either engine's) calls
`take_records` before it reads the inbox: each record becomes the `Trigger` files of the
loops it concerns, then goes.
The same file still runs as `python3 -I -S hook_script.py HOOKS_DIR HOOK_NAME [ARGS...]` for
wrappers written by an older loopd (until `loopd hooks install` runs again). Standard library
only, and no import of the rest of loopd. Errors never reach git: they go to a log
(`state/hooks.log` of the home, else `HOOKS_DIR/loopd-hooks.log`).

What it reads: `HOOKS_DIR/loopd-hooks.json`, written by `loopd hooks install`:
  {"version": 1, "homes": {HOME: {"loops": {LOOP: {"git_dir": DIR, "globs": [GLOB...]}}}}}
A record: `loopd-hook-record 1`, lines `hook|hooks_dir|cwd|git_dir|head VALUE`, a blank line,
then one `OLD NEW REF` line per branch that moved (NEW `?`: read REF when the record is taken).
What it writes: `HOME/state/inbox/STAMP-HEX.json`, the JSON of a `Trigger` of kind "push",
once per (loop, ref, new commit): a marker in `state/inbox/.seen/` remembers what was sent,
because one commit runs both reference-transaction and post-commit.

Text that comes with the update (branch names) is data: it is only ever put into JSON.
"""

from __future__ import annotations

import binascii
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

CONFIG_NAME = "loopd-hooks.json"
LOG_NAME = "loopd-hooks.log"
SEEN_KEEP_SECONDS = 24 * 3600
PRUNE_EVERY_SECONDS = 3600
# Hooks that tell which refs moved on stdin ("OLD NEW REF" lines).
STDIN_REF_HOOKS = ("reference-transaction", "post-receive")
# Hooks after which HEAD's branch holds the new work.
HEAD_HOOKS = ("post-commit", "post-merge", "post-rewrite")
RECORD_SUFFIX = ".hook"
RECORD_HEADER = "loopd-hook-record 1"
# A record still without its last line this long after it was made: its hook was killed.
INCOMPLETE_SECONDS = 60


class Incomplete(Exception):
    """A hook record whose last line is not written yet."""


# ---------------------------------------------------------------------------- globs
def branch_matches(globs: list[str], branch: str) -> bool:
    """daemon/globs.py, loaded by its path: one wildmatch for loopd, without the package."""
    global _globs
    if not any(ch in glob for glob in globs for ch in "*?[\\"):
        return branch in [glob.lstrip("/") for glob in globs]  # literal names: no regex needed
    if _globs is None:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "globs.py")
        spec = importlib.util.spec_from_file_location("loopd_hook_globs", path)
        assert spec is not None and spec.loader is not None  # the file is loopd's own
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _globs = module
    return _globs.any_branch_matches(globs, branch)


_globs: Any = None


# ---------------------------------------------------------------------------- repository
def _worktree_git_dir() -> str | None:
    """The git folder of the work tree the hook runs in (per worktree), found without git."""
    env = os.environ.get("GIT_DIR")
    if env:
        return os.path.abspath(env)
    here = os.getcwd()
    while True:
        dot = os.path.join(here, ".git")
        if os.path.isdir(dot):
            return dot
        if os.path.isfile(dot):
            with open(dot, encoding="utf-8") as fh:
                line = fh.readline().strip()
            if line.startswith("gitdir:"):
                return os.path.join(here, line[len("gitdir:") :].strip())
            return None
        if os.path.isfile(os.path.join(here, "HEAD")) and os.path.isdir(
            os.path.join(here, "objects")
        ):
            return here  # a bare repository
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _git_dir_of_cwd(git_dir: str | None = None) -> str | None:
    """The repository's common git folder (shared by its worktrees), found without git: of
    `git_dir` (a work tree's git folder), else of where this process runs."""
    if git_dir is None:
        git_dir = _worktree_git_dir()
    if git_dir is None:
        return None
    common = os.path.join(git_dir, "commondir")
    if os.path.isfile(common):
        with open(common, encoding="utf-8") as fh:
            git_dir = os.path.join(git_dir, fh.read().strip())
    return os.path.realpath(git_dir)


def _in_run_worktree() -> bool:
    """Whether git runs in a loopd run's worktree (its HEAD is a `loopd/*` branch).

    Only the agent runs git with hooks there (loopd's own git disables them); a ref it
    moves is a violation that judging puts back, so it must not start another run.
    """
    git_dir = _worktree_git_dir()
    if git_dir is None:
        return False
    try:
        with open(os.path.join(git_dir, "HEAD"), encoding="utf-8") as fh:
            head = fh.readline().strip()
    except OSError:
        return False
    return head.startswith("ref: refs/heads/loopd/")


def _head_update() -> list[tuple[str, str, str]]:
    """(old, new, ref) for HEAD's branch after a commit, merge or rewrite."""
    # The wrapper reads HEAD when the hook starts and passes it on (this may run later).
    head = os.environ.get("LOOPD_HOOK_HEAD")
    if head is None:
        proc = subprocess.run(
            ["git", "rev-parse", "HEAD", "--symbolic-full-name", "HEAD"],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=10,
        )
        head = proc.stdout if proc.returncode == 0 else ""
    lines = head.split()
    if len(lines) < 2 or not lines[1].startswith("refs/heads/"):
        return []  # detached HEAD (mid-rebase): the branch moves later, in one update
    return [("", lines[0], lines[1])]


def _stdin_updates() -> list[tuple[str, str, str]]:
    out = []
    for line in sys.stdin.read().splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3:
            out.append((parts[0], parts[1], parts[2]))
    return out


# ---------------------------------------------------------------------------- writing
def _zero(sha: str) -> bool:
    return not sha.strip("0")


def _seen_key(inbox: str, loop: str, ref: str, new: str) -> str:
    # The commit itself, and a checksum of which loop and ref it moved: short, filename-safe.
    where = binascii.crc32(f"{loop}\0{ref}".encode())
    return os.path.join(inbox, ".seen", f"{new}-{where:08x}")


def _claim(marker: str) -> bool:
    """Mark (loop, ref, new) as sent; False when another hook already did (atomic)."""
    seen = os.path.dirname(marker)
    if not os.path.isdir(seen):
        os.makedirs(seen, mode=0o700, exist_ok=True)
    try:
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return False
    _prune_seen(seen)
    return True


def _prune_seen(seen: str) -> None:
    stamp = os.path.join(seen, ".pruned")
    now = time.time()
    try:
        if now - os.stat(stamp).st_mtime < PRUNE_EVERY_SECONDS:
            return
    except FileNotFoundError:
        pass
    os.close(os.open(stamp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    os.utime(stamp)
    for entry in os.scandir(seen):
        try:
            if entry.name != ".pruned" and now - entry.stat().st_mtime > SEEN_KEEP_SECONDS:
                os.unlink(entry.path)
        except OSError:
            continue


def _write_trigger(inbox: str, trigger: dict, ts: datetime | None = None) -> str:
    now = ts or datetime.now(timezone.utc)  # noqa: UP017 - stays importable by older python3
    name = f"{now.strftime('%Y%m%dT%H%M%S%fZ')}-{os.urandom(4).hex()}.json"
    tmp = os.path.join(inbox, f".{name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, json.dumps(trigger).encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    final = os.path.join(inbox, name)
    os.replace(tmp, final)
    return final


def _log(path: str, message: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        stamp = datetime.now(timezone.utc).isoformat()  # noqa: UP017
        os.write(fd, f"{stamp} {message}\n".encode())
        os.close(fd)
    except OSError:
        pass


# ---------------------------------------------------------------------------- main
def handle(hooks_dir: str, hook: str, args: list[str]) -> list[str]:
    """Write the triggers for this hook call, run inside git (an older wrapper); the files."""
    if hook == "reference-transaction" and (not args or args[0] != "committed"):
        return []
    if hook in STDIN_REF_HOOKS:
        updates = _stdin_updates()
    elif hook in HEAD_HOOKS:
        updates = _head_update()
    else:
        return []
    if _in_run_worktree():
        return []
    return _write_for(hooks_dir, hook, updates, _git_dir_of_cwd)


def _write_for(
    hooks_dir: str,
    hook: str,
    updates: list[tuple[str, str, str]],
    here_of: Callable[[], str | None],
    only_home: str | None = None,
    ts: datetime | None = None,
) -> list[str]:
    """The push triggers of `updates` for every loop they concern; the inbox files written.

    `here_of` finds the repository the hook ran in, asked only for a shared hooks folder;
    `only_home` limits the homes (a record in one home's inbox is that home's alone).
    """
    with open(os.path.join(hooks_dir, CONFIG_NAME), encoding="utf-8") as fh:
        config = json.load(fh)
    updates = [
        (old, new, ref)
        for old, new, ref in updates
        if ref.startswith("refs/heads/")
        and not ref.startswith("refs/heads/loopd/")
        and not _zero(new)
        # A branch made locally (`git branch`, `checkout -b`) brings no new work; a branch
        # pushed in does, and post-receive reports it.
        and not (hook == "reference-transaction" and _zero(old))
    ]
    if not updates:
        return []
    here = None
    written = []
    own_hooks = os.path.realpath(hooks_dir)
    for home, entry in sorted(config.get("homes", {}).items()):
        if only_home is not None and os.path.realpath(home) != os.path.realpath(only_home):
            continue
        state = os.path.join(home, "state")
        if not os.path.isdir(home):
            continue
        inbox = os.path.join(state, "inbox")
        for loop, spec in sorted(entry.get("loops", {}).items()):
            git_dir = spec.get("git_dir", "")
            # A hooks folder shared between repositories (core.hooksPath) runs for all of
            # them; only the loop's own repository counts.
            if own_hooks != os.path.realpath(os.path.join(git_dir, "hooks")):
                if here is None:
                    here = here_of() or ""
                if here != os.path.realpath(git_dir):
                    continue
            for old, new, ref in updates:
                branch = ref[len("refs/heads/") :]
                if not branch_matches(list(spec.get("globs", [])), branch):
                    continue
                path = _trigger_once(state, inbox, loop, hook, (old, new, ref), ts)
                if path is not None:
                    written.append(path)
    return written


# ---------------------------------------------------------------------------- records
def take_records(inbox: str) -> list[str]:
    """Turn the hook records waiting in `inbox` into trigger files, oldest first; the files.

    A record goes once handled, whatever came of it (a bad one is logged): the `.seen`
    markers make a record handled twice (a crash between) give its triggers once.
    """
    try:
        names = [n for n in os.listdir(inbox) if n.endswith(RECORD_SUFFIX) and n[:1] != "."]
    except (FileNotFoundError, NotADirectoryError):
        return []
    home = os.path.dirname(os.path.dirname(os.path.abspath(inbox)))
    found = []
    for name in names:
        path = os.path.join(inbox, name)
        try:
            found.append((os.stat(path).st_mtime, name, path))
        except FileNotFoundError:
            continue
    written: list[str] = []
    for mtime, _name, path in sorted(found):
        record: dict[str, str] = {}
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read(1 << 20)
        except FileNotFoundError:
            continue  # taken by another caller meanwhile
        try:
            record, updates = _parse_record(text)
            when = datetime.fromtimestamp(mtime, timezone.utc)  # noqa: UP017
            written.extend(_take_record(record, updates, home, when))
        except Incomplete as exc:
            if time.time() - mtime < INCOMPLETE_SECONDS:
                continue  # the hook is writing it: its close wakes the daemon again
            _log_failure(record.get("hooks_dir", ""), "?", exc, home)  # a hook killed midway
        except Exception as exc:  # noqa: BLE001 - one bad record must not stop the others
            _log_failure(record.get("hooks_dir", ""), record.get("hook", "?"), exc, home)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return written


def _parse_record(text: str) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    # First, whether it is whole: a record just created is empty, one midway cut anywhere.
    if not text.endswith("\nend\n"):
        raise Incomplete("the hook is still writing it, or was killed before its end")
    head, sep, body = text.partition("\n\n")
    lines = head.split("\n")
    if lines[0] != RECORD_HEADER or not sep:
        raise ValueError(f"not a hook record of this loopd (first line {lines[0][:40]!r})")
    body_lines = body.split("\n")
    record = {}
    for line in lines[1:]:
        key, _, value = line.partition(" ")
        record[key] = value
    for key in ("hook", "hooks_dir", "cwd"):
        if not record.get(key):
            raise ValueError(f"hook record without {key!r}")
    # The wrapper writes them as git gave them: relative to where the hook ran.
    record["hooks_dir"] = os.path.join(record["cwd"], record["hooks_dir"])
    record["git_dir"] = os.path.join(record["cwd"], record.get("git_dir") or ".")
    updates = []
    for line in body_lines[:-2]:
        parts = line.split(" ", 2)
        if len(parts) == 3:
            updates.append((parts[0], parts[1], parts[2]))
    return record, updates


def _take_record(
    record: dict[str, str], updates: list[tuple[str, str, str]], home: str, when: datetime
) -> list[str]:
    hooks_dir = record["hooks_dir"]
    worktree_git_dir = record["git_dir"]
    if record.get("head", "").startswith("ref: refs/heads/loopd/"):
        return []  # a run's worktree (the wrapper skips it too)
    resolved = []
    for old, new, ref in updates:
        if new == "?":  # a packed ref the wrapper could not read: its commit now
            new = _resolve(_git_dir_of_cwd(worktree_git_dir) or worktree_git_dir, ref)
            if not new:
                continue
        resolved.append((old, new, ref))
    return _write_for(
        hooks_dir,
        record["hook"],
        resolved,
        lambda: _git_dir_of_cwd(worktree_git_dir),
        only_home=home,
        ts=when,
    )


def _resolve(git_dir: str, ref: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    proc = subprocess.run(
        ["git", f"--git-dir={git_dir}", "rev-parse", "--verify", "-q", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=env,
        timeout=10,
    )
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _trigger_once(
    state: str,
    inbox: str,
    loop: str,
    hook: str,
    update: tuple[str, str, str],
    ts: datetime | None = None,
) -> str | None:
    """The push trigger of one update for one loop, unless a hook sent it already; its path."""
    old, new, ref = update
    branch = ref[len("refs/heads/") :]
    for folder in (state, inbox):
        if not os.path.isdir(folder):
            os.makedirs(folder, mode=0o700, exist_ok=True)
    marker = _seen_key(inbox, loop, ref, new)
    if not _claim(marker):
        return None
    trigger = {
        "loop": loop,
        "kind": "push",
        "reason": f"{branch} moved to {new[:12]} ({hook})",
        "ref": ref,
        "old": "" if _zero(old) else old,
        "new": new,
        "ts": (ts or datetime.now(timezone.utc)).isoformat(),  # noqa: UP017
    }
    try:
        return _write_trigger(inbox, trigger, ts)
    except BaseException:
        os.unlink(marker)  # not sent: a later hook for this update may try again
        raise


def _log_failure(hooks_dir: str, hook: str, exc: BaseException, home: str | None = None) -> None:
    """Log a failure: in the home's `state/hooks.log` when the hooks serve one home (or a
    record's hooks folder holds no configuration), else in the hooks folder's log."""
    config = os.path.join(hooks_dir, CONFIG_NAME) if hooks_dir else ""
    # No configuration there (the hooks were removed since): nothing to write beside it.
    log = os.path.join(hooks_dir, LOG_NAME) if os.path.exists(config) else None
    try:
        if log is not None:
            with open(os.path.join(hooks_dir, CONFIG_NAME), encoding="utf-8") as fh:
                homes = list(json.load(fh).get("homes", {}))
            home = homes[0] if len(homes) == 1 else None
        if home is not None and os.path.isdir(os.path.join(home, "state")):
            log = os.path.join(home, "state", "hooks.log")
    except Exception:  # noqa: BLE001
        pass
    if log is not None:
        _log(log, f"{hook}: {type(exc).__name__}: {exc}")


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        return 0
    hooks_dir, hook, args = argv[1], argv[2], argv[3:]
    try:
        handle(hooks_dir, hook, args)
    except BaseException as exc:  # noqa: BLE001 - a hook must never fail git
        _log_failure(hooks_dir, hook, exc)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
