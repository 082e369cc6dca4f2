"""The program loopd's git hooks run: a ref update becomes an inbox trigger.

Run as `python3 -I -S hook_script.py HOOKS_DIR HOOK_NAME [HOOK ARGS...]` by the shell
wrapper that `loopd hooks install` writes. Standard library only, and no import of the
rest of loopd, so that it starts in milliseconds. It never fails git: every error goes to
a log (`state/hooks.log` of the home, else `HOOKS_DIR/loopd-hooks.log`) and it exits 0.

What it reads: `HOOKS_DIR/loopd-hooks.json`, written by `loopd hooks install`:
  {"version": 1, "homes": {HOME: {"loops": {LOOP: {"git_dir": DIR, "globs": [GLOB...]}}}}}
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
from datetime import datetime, timezone

CONFIG_NAME = "loopd-hooks.json"
LOG_NAME = "loopd-hooks.log"
SEEN_KEEP_SECONDS = 24 * 3600
PRUNE_EVERY_SECONDS = 3600
# Hooks that tell which refs moved on stdin ("OLD NEW REF" lines).
STDIN_REF_HOOKS = ("reference-transaction", "post-receive")
# Hooks after which HEAD's branch holds the new work.
HEAD_HOOKS = ("post-commit", "post-merge", "post-rewrite")


# ---------------------------------------------------------------------------- globs
def branch_matches(globs: list[str], branch: str) -> bool:
    """daemon/globs.py, loaded by its path: one wildmatch for loopd, without the package."""
    global _globs
    if not any(ch in glob for glob in globs for ch in "*?[\\"):
        return branch in [glob.lstrip("/") for glob in globs]  # literal names: no regex needed
    if _globs is None:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "globs.py")
        spec = importlib.util.spec_from_file_location("loopd_hook_globs", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _globs = module
    return _globs.any_branch_matches(globs, branch)


_globs = None


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


def _git_dir_of_cwd() -> str | None:
    """The repository's common git folder (shared by its worktrees), found without git."""
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


def _write_trigger(inbox: str, trigger: dict) -> str:
    now = datetime.now(timezone.utc)  # noqa: UP017 - stays importable by older python3
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
    """Write the triggers for this hook call; the inbox files written."""
    if hook == "reference-transaction" and (not args or args[0] != "committed"):
        return []
    with open(os.path.join(hooks_dir, CONFIG_NAME), encoding="utf-8") as fh:
        config = json.load(fh)
    if hook in STDIN_REF_HOOKS:
        updates = _stdin_updates()
    elif hook in HEAD_HOOKS:
        updates = _head_update()
    else:
        return []
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
    if not updates or _in_run_worktree():
        return []
    here = None
    written = []
    own_hooks = os.path.realpath(hooks_dir)
    for home, entry in sorted(config.get("homes", {}).items()):
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
                    here = _git_dir_of_cwd() or ""
                if here != os.path.realpath(git_dir):
                    continue
            for old, new, ref in updates:
                branch = ref[len("refs/heads/") :]
                if not branch_matches(list(spec.get("globs", [])), branch):
                    continue
                path = _trigger_once(state, inbox, loop, hook, (old, new, ref))
                if path is not None:
                    written.append(path)
    return written


def _trigger_once(
    state: str, inbox: str, loop: str, hook: str, update: tuple[str, str, str]
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
        "ts": datetime.now(timezone.utc).isoformat(),  # noqa: UP017
    }
    try:
        return _write_trigger(inbox, trigger)
    except BaseException:
        os.unlink(marker)  # not sent: a later hook for this update may try again
        raise


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        return 0
    hooks_dir, hook, args = argv[1], argv[2], argv[3:]
    try:
        handle(hooks_dir, hook, args)
    except BaseException as exc:  # noqa: BLE001 - a hook must never fail git
        log = os.path.join(hooks_dir, LOG_NAME)
        try:
            with open(os.path.join(hooks_dir, CONFIG_NAME), encoding="utf-8") as fh:
                homes = list(json.load(fh).get("homes", {}))
            if len(homes) == 1 and os.path.isdir(os.path.join(homes[0], "state")):
                log = os.path.join(homes[0], "state", "hooks.log")
        except Exception:  # noqa: BLE001
            pass
        _log(log, f"{hook}: {type(exc).__name__}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
