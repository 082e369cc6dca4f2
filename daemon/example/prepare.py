"""Prepare the example's repository at `~/.cache/loopd/example` from the shipped files."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from daemon.example import AGENT_SOURCE, REPO_FILES, agent_path, is_example_repo, repo_path
from daemon.git.safe import Git, GitError

# Shipped without the dot, so the file never acts on loopd's own source tree.
RENAMED = {"gitignore": ".gitignore"}


def _is_repository(path: Path) -> bool:
    return (path / ".git").exists()


def prepare_example(path: Path | None = None) -> Path | None:
    """Make the example repository unless it is there; the path when it was made now.

    Made in a temporary folder next to it and renamed into place, so a half-made
    repository is never left where a run would use it.
    """
    target = path or repo_path()
    copy_agent()
    if _is_repository(target):
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        # Not a repository (a leftover of a failed start): made again from the shipped files.
        shutil.rmtree(target)
    work = Path(tempfile.mkdtemp(prefix=".example-", dir=target.parent))
    try:
        for source in sorted(REPO_FILES.iterdir()):
            if source.is_file():
                shutil.copyfile(source, work / RENAMED.get(source.name, source.name))
        git = Git(work)
        git.run("init", "-q", "-b", "main")
        git.run("add", "--all", "--", ".")
        git.run(
            "commit",
            "--no-verify",
            "--no-gpg-sign",
            "-q",
            "-m",
            "The example: calc.py with two bugs its tests find",
        )
        work.rename(target)
    except (GitError, OSError):
        shutil.rmtree(work, ignore_errors=True)
        raise
    return target


def copy_agent() -> Path:
    """The example agent's script, copied (afresh: a newer loopd ships a newer one) to where
    its profile runs it from."""
    target = agent_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.with_name(f".{target.name}.new")
    shutil.copyfile(AGENT_SOURCE, staged)
    staged.replace(target)
    return target


def prepare_examples(loops: Mapping[str, object]) -> list[Path]:
    """Prepare the example repository when an enabled loop uses it; the paths made now."""
    made = []
    for loop in loops.values():
        config = getattr(loop, "config", None)
        if config is None or not config.enabled or not is_example_repo(config.repo_path):
            continue
        path = prepare_example(config.repo_path)
        if path is not None:
            made.append(path)
    return made
