"""Shared test helpers: real git repositories, homes, and the loopd command as a subprocess."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from daemon.state.stored import open_stored
from tests.orphans import die_with_parent

ROOT = Path(__file__).resolve().parent.parent


def git(repo: Path, *args: str) -> str:
    env = dict(os.environ)
    env.update(
        GIT_AUTHOR_NAME="Test User",
        GIT_AUTHOR_EMAIL="test@example.com",
        GIT_COMMITTER_NAME="Test User",
        GIT_COMMITTER_EMAIL="test@example.com",
        GIT_CONFIG_NOSYSTEM="1",  # a machine's /etc/gitconfig (git-lfs's, say) stays out
    )
    proc = subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, env=env, timeout=60
    )
    if proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout.strip()


def make_repo(path: Path, files: dict[str, str] | None = None, branch: str = "main") -> Path:
    """A real git repository with one commit holding `files`."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", branch)
    for rel, text in (files or {"README.md": "hello\n"}).items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


def make_home(path: Path, config: str = "", loops: dict[str, str] | None = None) -> Path:
    """A home with `loopd.toml` holding `config` and `loops/NAME.toml` files.

    The worktrees folder defaults to one inside the test's temporary folder.
    """
    path.mkdir(parents=True, exist_ok=True)
    (path / "loops").mkdir(exist_ok=True)
    for sub in ("trial", "active", "rejected", "retired"):
        (path / "rules" / sub).mkdir(parents=True, exist_ok=True)
    if "[limits]" not in config:
        config += f'\n[limits]\nworktrees = "{path.parent / "worktrees"}"\n'
    (path / "loopd.toml").write_text(config)
    for name, text in (loops or {}).items():
        (path / "loops" / f"{name}.toml").write_text(text)
    return path


def loopd(
    home: Path, *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `loopd --home HOME ARGS` as a real subprocess."""
    full_env = dict(os.environ)
    full_env.pop("LOOPD_HOME", None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )


def start_daemon(home: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`loopd run` for `home` as a real process, returned once its lock and status exist."""
    import time

    full_env = dict(os.environ)
    full_env.pop("LOOPD_HOME", None)
    full_env.update(env or {})
    with open(home / "daemon.log", "a") as log:  # the child keeps its own copy
        proc = subprocess.Popen(
            [sys.executable, "-m", "daemon.cli.main", "--home", str(home), "run"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
            cwd=ROOT,
            text=True,
            preexec_fn=die_with_parent,  # an interrupted session leaves no daemon behind
        )
    status = home / "state" / "status.toml"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"loopd run exited {proc.returncode}: {daemon_log(home)}")
        if status.exists() and f"pid = {proc.pid}" in status.read_text():
            return proc
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"loopd run did not start: {daemon_log(home)}")


def daemon_log(home: Path) -> str:
    path = home / "daemon.log"
    return path.read_text() if path.exists() else ""


def stop_daemon(proc: subprocess.Popen[str], timeout: float = 30) -> int:
    """SIGTERM, then wait; SIGKILL if it does not stop in time."""
    import signal

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


def wait_for(predicate, timeout: float = 30, interval: float = 0.1, what: str = ""):  # noqa: ANN001, ANN201
    """Poll `predicate` until it returns something true; fail after `timeout` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


def events(home: Path) -> list[dict]:
    import json

    path = home / "state" / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def runs(home: Path) -> list[dict]:
    """Every run.toml under the home's state, oldest first."""
    import tomllib

    folder = home / "state" / "runs"
    out = []
    for child in sorted(folder.iterdir()) if folder.exists() else []:
        path = child / "run.toml"
        if path.exists():
            out.append(tomllib.loads(path.read_text()))
    return out


def in_fresh_interpreter(target: str, tmp_path: Path, timeout: float = 180) -> None:
    """Run `module:function(tmp_path)` in a new interpreter; fail with its output if it fails.

    For tests that count what their own process holds (inotify descriptors, zombie children):
    in a pytest-xdist worker, other tests' leftovers in the same process change the count."""
    module, func = target.split(":")
    code = f"import pathlib, sys, {module} as m; m.{func}(pathlib.Path(sys.argv[1]))"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def unique_token(prefix: str, tmp_path: Path) -> str:
    """A token for command lines that no other test's processes hold, even a test of the same
    name in another pytest-xdist worker or another session on the machine (tmp_path's own name
    repeats across workers: each numbers its folders from 0)."""
    import hashlib

    digest = hashlib.sha1(str(tmp_path).encode()).hexdigest()[:10]
    return f"{prefix}-{tmp_path.name}-{digest}"


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def processes_with(token: str) -> list[int]:
    """Host pids of live processes whose command line holds `token` (this one excluded)."""
    import os

    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        if token.encode() in cmdline and pid_alive(int(name)):
            found.append(int(name))
    return found


def talk(tmp_path: Path) -> tuple[Path, str]:
    """A folder a test shares with its agent, and the loopd.toml text that makes it writable.

    Agents run sandboxed: they write only their tree and what `[sandbox] writable` names.
    """
    folder = tmp_path / "talk"
    folder.mkdir(exist_ok=True)
    return folder, f'\n[sandbox]\nwritable = ["{folder}"]\n'


def take_triggers(store: Any) -> list[Any]:
    """Read and remove every trigger file of `store`'s inbox, oldest first (the daemon
    takes them through its queue; a test reads what a hook or a command left there)."""
    names = store.inbox_names()
    out = [t for t in map(store.read_trigger, names) if t is not None]
    store.remove_inbox(t.id for t in out)
    return out


def commit_all(repo_git: Any, message: str) -> str | None:
    """Commit everything in a tree through safe git (a daemon.git.safe.Git); the new commit,
    or None when nothing changed. Runs commit through integrity.py; tests set trees up."""
    repo_git.run("add", "--all", "--", ".")
    if repo_git.run("diff", "--cached", "--quiet", check=False).returncode == 0:
        return None
    repo_git.run("commit", "--no-verify", "--no-gpg-sign", "-q", "-m", message)
    return repo_git.out("rev-parse", "HEAD")


def file_text(path: Path) -> str:
    """A file's text as loopd keeps it, decompressed when it is kept compressed (`.gz`, as
    transcripts are once their attempt ended): what a search of state/ must read."""
    data = Path(path).read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    return data.decode("utf-8", "replace")


def stored_text(path: Path) -> str:
    """A state file's text, compressed (`PATH.gz`, as transcripts are once their attempt
    ended) or not."""
    with open_stored(Path(path)) as fh:
        return fh.read().decode("utf-8", "replace")


def transcript_text(attempt_dir: Path) -> str:
    """An attempt's transcript.jsonl as text, compressed or not."""
    return stored_text(Path(attempt_dir) / "transcript.jsonl")


def both_paths(home: Path, *argv: str, env: dict[str, str] | None = None) -> tuple[str, str]:
    """`loopd --home HOME ARGV` by the plain path alone and by the full path: the two outputs
    (stdout, then stderr and the exit code) asserted equal; the plain one's returned."""
    plain = loopd(home, *argv, env={**(env or {}), "LOOPD_READ_PATH": "only"})
    full = loopd(home, *argv, env={**(env or {}), "LOOPD_READ_PATH": "models"})
    assert plain.returncode != 3, plain.stderr  # the plain path answered
    assert (plain.stdout, plain.stderr, plain.returncode) == (
        full.stdout,
        full.stderr,
        full.returncode,
    )
    return plain.stdout, plain.stderr
