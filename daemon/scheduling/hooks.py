"""Install and remove the git hooks that turn ref updates into inbox triggers.

Each hook is a small POSIX sh wrapper: it runs the hook that was there before (moved aside
to `HOOK.loopd-orig`) with the same arguments and stdin and keeps its exit code, then runs
`hook_script.py` with `python3 -I -S`. Hook text is passed with "$@" and never evaluated.
What each home's loops watch (`on_push` globs) is kept in `loopd-hooks.json` next to the
hooks, so one hooks folder serves several homes and several repositories (core.hooksPath).

Hooks go where git runs them: `git rev-parse --git-path hooks`, which honours core.hooksPath.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from daemon.git.safe import git_environment
from daemon.scheduling import hook_script

HOOK_NAMES = ("post-commit", "post-merge", "post-rewrite", "post-receive", "reference-transaction")
STDIN_HOOKS = ("post-rewrite", "post-receive", "reference-transaction")
# reference-transaction (git 2.28+) already reported the update these follow, and the
# trigger is deduplicated: they run in the background, for an older git's sake.
BACKGROUND_HOOKS = ("post-commit", "post-merge", "post-rewrite")
ORIG_SUFFIX = ".loopd-orig"
MARKER = "# loopd-hook-wrapper v1"
CONFIG_NAME = hook_script.CONFIG_NAME

_WRAPPER = """\
#!/bin/sh
# loopd: turns ref updates into triggers for loops with on_push.
# Written by `loopd hooks install`; `loopd hooks install --uninstall` puts back what was here.
# The hook that was here before, if any, is now HOOK.loopd-orig and still runs first.
{marker}
hook={hook}
py={python}
script={script}
stdin_hook={stdin_hook}
background={background}
case $0 in */*) dir=${{0%/*}} ;; *) dir=. ;; esac
orig="$dir/$hook.loopd-orig"
[ -x "$py" ] || py=python3
if [ "$hook" = reference-transaction ] && [ "${{1-}}" != committed ]; then
	if [ -x "$orig" ]; then exec "$orig" "$@"; fi
	exit 0
fi
run_loopd() {{
	if [ "$background" = yes ]; then
		# HEAD is read now: by the time a background job reads it, it may have moved on.
		LOOPD_HOOK_HEAD=$(git rev-parse HEAD --symbolic-full-name HEAD 2>/dev/null) || return 0
		export LOOPD_HOOK_HEAD
		"$py" -I -S "$script" "$dir" "$hook" "$@" </dev/null >/dev/null 2>&1 &
	else
		"$py" -I -S "$script" "$dir" "$hook" "$@" >/dev/null 2>&1
	fi
}}
status=0
if [ -x "$orig" ]; then
	if [ "$stdin_hook" = yes ]; then
		buf=$(mktemp "${{TMPDIR:-/tmp}}/loopd-hook.XXXXXX") || exec "$orig" "$@"
		cat >"$buf"
		"$orig" "$@" <"$buf"
		status=$?
		run_loopd "$@" <"$buf"
		rm -f "$buf"
		exit $status
	fi
	"$orig" "$@"
	status=$?
fi
run_loopd "$@"
exit $status
"""


class HookError(Exception):
    """Hooks cannot be installed or removed as asked; the message says what to do."""


def _git(repo: Path, *args: str) -> str:
    # Reading config runs no repository program; fsmonitor is off for safety anyway.
    proc = subprocess.run(
        ["git", "-c", "core.fsmonitor=false", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        env=git_environment(user_config=True),
        stdin=subprocess.DEVNULL,
        timeout=30,
    )
    if proc.returncode != 0:
        raise HookError(f"{repo}: git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def hooks_dir(repo: Path) -> Path:
    """The folder git runs `repo`'s hooks from (core.hooksPath when set)."""
    return (repo / _git(repo, "rev-parse", "--git-path", "hooks")).resolve()


def common_git_dir(repo: Path) -> Path:
    """The repository's common git folder (shared by its worktrees)."""
    return (repo / _git(repo, "rev-parse", "--git-common-dir")).resolve()


def wrapper_text(hook: str) -> str:
    """The wrapper script for one hook, pointing at this interpreter and hook_script.py."""
    return _WRAPPER.format(
        marker=MARKER,
        hook=shlex.quote(hook),
        python=shlex.quote(sys.executable),
        script=shlex.quote(str(Path(hook_script.__file__).resolve())),
        stdin_hook="yes" if hook in STDIN_HOOKS else "no",
        background="yes" if hook in BACKGROUND_HOOKS else "no",
    )


def is_wrapper(path: Path) -> bool:
    """Whether `path` is a hook that loopd wrote."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return MARKER.encode() in head


def _write_file(path: Path, data: str, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".loopd-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_config(folder: Path) -> dict:
    path = folder / CONFIG_NAME
    if not path.exists():
        return {"version": 1, "homes": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise HookError(
            f"{path}: cannot be read ({exc}); delete it and run `loopd hooks install` again"
        ) from None
    data.setdefault("homes", {})
    return data


def _config_text(config: dict) -> str:
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def hooks_watch(home: Path, repo: Path, loop: str) -> bool:
    """Whether loopd's hooks are in `repo`, watching for `loop` of `home`."""
    try:
        folder = hooks_dir(Path(repo).resolve())
        config = _read_config(folder)
    except (HookError, OSError):
        return False
    if not any(is_wrapper(folder / hook) for hook in HOOK_NAMES):
        return False
    entry = config["homes"].get(str(Path(home).resolve()), {})
    return loop in entry.get("loops", {})


def install_hooks(
    home: Path, repo: Path, loops: Mapping[str, Sequence[str]], replace: bool = False
) -> list[Path]:
    """Install the hooks in `repo` for `loops` (name -> on_push globs); the files changed.

    Existing hooks are moved to HOOK.loopd-orig and chained. Installing again with the same
    loops changes nothing. `replace` drops this home's other loops of this repository.
    """
    home = Path(home).resolve()
    repo = Path(repo).resolve()
    folder = hooks_dir(repo)
    git_dir = str(common_git_dir(repo))
    folder.mkdir(parents=True, exist_ok=True)
    changed: list[Path] = []

    # Check every hook before touching any, so a conflict leaves the folder as it was.
    for hook in HOOK_NAMES:
        path, orig = folder / hook, folder / f"{hook}{ORIG_SUFFIX}"
        exists = path.exists() or path.is_symlink()
        if (orig.exists() or orig.is_symlink()) and not (exists and is_wrapper(path)):
            raise HookError(
                f"{orig} exists but {path} is not loopd's wrapper; keep the hook you want "
                f"as {path}, remove {orig}, and run `loopd hooks install` again"
            )

    for hook in HOOK_NAMES:
        path, orig = folder / hook, folder / f"{hook}{ORIG_SUFFIX}"
        text = wrapper_text(hook)
        if is_wrapper(path):
            if path.read_text(encoding="utf-8") == text:
                continue
        elif path.exists() or path.is_symlink():
            os.rename(path, orig)  # keeps bytes, mode and a symlink as they are
            changed.append(orig)
        _write_file(path, text, 0o755)
        changed.append(path)

    config = _read_config(folder)
    before = _config_text(config)
    entry = config["homes"].setdefault(str(home), {"loops": {}})
    entry.setdefault("loops", {})
    if replace:
        for name in [n for n, s in entry["loops"].items() if s.get("git_dir") == git_dir]:
            del entry["loops"][name]
    for name, globs in loops.items():
        entry["loops"][name] = {"git_dir": git_dir, "globs": list(globs)}
    after = _config_text(config)
    if after != before or not (folder / CONFIG_NAME).exists():
        _write_file(folder / CONFIG_NAME, after, 0o600)
        changed.append(folder / CONFIG_NAME)
    return changed


def uninstall_hooks(home: Path, repo: Path, loops: Sequence[str] | None = None) -> list[Path]:
    """Remove this home's loops (all, or `loops`) from `repo`'s hooks; the files changed.

    When no loop of any home is left, each wrapper is replaced by the hook that was there
    before, byte for byte and with its mode, or removed when there was none.
    """
    home = Path(home).resolve()
    repo = Path(repo).resolve()
    folder = hooks_dir(repo)
    git_dir = str(common_git_dir(repo))
    changed: list[Path] = []
    config_path = folder / CONFIG_NAME
    config = _read_config(folder)
    entry = config["homes"].get(str(home), {"loops": {}})
    names = [
        n
        for n, spec in entry.get("loops", {}).items()
        if spec.get("git_dir") == git_dir and (loops is None or n in loops)
    ]
    for name in names:
        del entry["loops"][name]
    if str(home) in config["homes"] and not entry.get("loops"):
        del config["homes"][str(home)]
    if any(e.get("loops") for e in config["homes"].values()):
        if names:
            _write_file(config_path, _config_text(config), 0o600)
            changed.append(config_path)
        return changed

    for hook in HOOK_NAMES:
        path, orig = folder / hook, folder / f"{hook}{ORIG_SUFFIX}"
        if not is_wrapper(path):
            continue  # not ours (any more): leave it and its .loopd-orig alone
        if orig.exists() or orig.is_symlink():
            os.replace(orig, path)
        else:
            path.unlink()
        changed.append(path)
    for leftover in (config_path, folder / hook_script.LOG_NAME):
        if leftover.exists():
            leftover.unlink()
            changed.append(leftover)
    return changed


def inside_work_tree(repo: Path, folder: Path) -> bool:
    """Whether the hooks folder lies in the work tree (a tracked core.hooksPath, say)."""
    repo = Path(repo).resolve()
    return folder == repo or repo in folder.parents and ".git" not in folder.relative_to(repo).parts
