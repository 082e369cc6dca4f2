"""Shared test helpers: real git repositories, homes, and the loopd command as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git(repo: Path, *args: str) -> str:
    env = dict(os.environ)
    env.update(
        GIT_AUTHOR_NAME="Test User",
        GIT_AUTHOR_EMAIL="test@example.com",
        GIT_COMMITTER_NAME="Test User",
        GIT_COMMITTER_EMAIL="test@example.com",
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
