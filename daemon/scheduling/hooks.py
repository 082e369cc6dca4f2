"""Install and remove the git hooks that turn ref updates into inbox triggers.

Each hook is a small POSIX sh wrapper: it runs the hook that was there before (moved aside
to `HOOK.loopd-orig`) with the same arguments and stdin and keeps its exit code, then writes
what moved (a record) into each hooked home's inbox, ended by a line `end` (the daemon
leaves a record until it is whole), and returns: no Python, no other program, starts
inside `git commit` (a process costs milliseconds on a loaded machine). The daemon turns
records into triggers (`hook_script.take_records`). Hook text is passed with "$@" and is
never evaluated.
What each home's loops watch (`on_push` globs) is kept in `loopd-hooks.json` next to the
hooks, so one hooks folder serves several homes and several repositories (core.hooksPath).

Hooks go where git runs them: `git rev-parse --git-path hooks`, which honours core.hooksPath.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from daemon.git.safe import git_environment
from daemon.scheduling import hook_script

HOOK_NAMES = ("post-commit", "post-merge", "post-rewrite", "post-receive", "reference-transaction")
# A git that runs reference-transaction (2.28+) reports every branch update there; the
# commit hooks would only add a process to each commit, so they are installed for an
# older git alone.
REFS_HOOKS = ("post-receive", "reference-transaction")
REFERENCE_TRANSACTION_GIT = (2, 28)
STDIN_HOOKS = ("post-rewrite", "post-receive", "reference-transaction")
# The wrappers read where to write from this list (one inbox folder a line), made from
# loopd-hooks.json at each install and uninstall: sh reads no JSON.
INBOXES_NAME = "loopd-hooks.inboxes"
ORIG_SUFFIX = ".loopd-orig"
MARKER = "# loopd-hook-wrapper v2"
MARKER_PREFIX = "# loopd-hook-wrapper v"  # any version: an older wrapper is replaced, not chained
CONFIG_NAME = hook_script.CONFIG_NAME

_WRAPPER = """\
#!/bin/sh
# loopd: turns ref updates into triggers for loops with on_push.
# Written by `loopd hooks install`; `loopd hooks install --uninstall` puts back what was here.
# The hook that was here before, if any, is now HOOK.loopd-orig and still runs first.
# It starts no Python: it writes what moved into each home's inbox and returns; the daemon
# turns that record into triggers (hook_script.py).
{marker}
hook={hook}
stdin_hook={stdin_hook}
case $0 in */*) dir=${{0%/*}} ;; *) dir=. ;; esac
orig="$dir/$hook.loopd-orig"
if [ "$hook" = reference-transaction ] && [ "${{1-}}" != committed ]; then
	if [ -x "$orig" ]; then exec "$orig" "$@"; fi
	exit 0
fi
nl='
'
# The work tree's git folder and HEAD, read now: git runs hooks at the work tree's top (or
# in a bare repository's folder). A run's worktree (HEAD on loopd/*) triggers nothing.
gd=${{GIT_DIR-}}
if [ -z "$gd" ]; then
	if [ -d .git ]; then gd=.git
	elif [ -f .git ]; then read -r gd <.git; gd=${{gd#gitdir: }}
	else gd=.
	fi
fi
head=
read -r head <"$gd/HEAD" 2>/dev/null
updates() {{
	if [ "$stdin_hook" = yes ]; then
		while read -r old new ref; do
			case $ref in refs/heads/loopd/*) continue ;; refs/heads/?*) ;; *) continue ;; esac
			case $new in *[!0]*) ;; *) continue ;; esac
			# A branch made locally brings no new work; one pushed in does (post-receive).
			if [ "$hook" = reference-transaction ]; then
				case $old in *[!0]*) ;; *) continue ;; esac
			fi
			moved="$moved$old $new $ref$nl"
		done
		case $head in "ref: refs/heads/loopd/"*) moved= ;; esac
	else
		case $head in "ref: refs/heads/loopd/"*) return 0 ;; esac
		case $head in "ref: refs/heads/"?*) ;; *) return 0 ;; esac
		ref=${{head#ref: }}
		common=$gd
		if [ -f "$gd/commondir" ]; then
			read -r common <"$gd/commondir"
			case $common in /*) ;; *) common=$gd/$common ;; esac
		fi
		new=
		read -r new <"$common/$ref" 2>/dev/null
		moved="0 ${{new:-?}} $ref$nl"
	fi
}}
record() {{
	moved=
	updates
	[ -n "$moved" ] || return 0
	[ -f "$dir/{inboxes}" ] || return 0
	umask 077
	set -C  # a record is created, never overwritten; no mv: one process fewer
	while IFS= read -r inbox; do
		[ -d "${{inbox%/state/inbox}}" ] || continue
		[ -d "$inbox" ] || mkdir -p "$inbox" || continue
		n=0
		# The last line `end` says the record is whole: the daemon leaves it until then.
		until printf '%s\\n%s\\n%s\\n%s\\n%s\\n%s\\n\\n%send\\n' 'loopd-hook-record 1' \\
			"hook $hook" "hooks_dir $dir" "cwd $PWD" "git_dir $gd" "head $head" "$moved" \\
			>"$inbox/hook-$$-$n.hook"; do
			n=$((n + 1))
			[ $n -lt 50 ] || continue 2
		done
	done <"$dir/{inboxes}"
}}
status=0
if [ -x "$orig" ]; then
	if [ "$stdin_hook" = yes ]; then
		buf=$(mktemp "${{TMPDIR:-/tmp}}/loopd-hook.XXXXXX") || exec "$orig" "$@"
		cat >"$buf"
		"$orig" "$@" <"$buf"
		status=$?
		record <"$buf" >/dev/null 2>&1
		rm -f "$buf"
		exit $status
	fi
	"$orig" "$@"
	status=$?
fi
record >/dev/null 2>&1
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
    """The wrapper script for one hook (plain sh: no interpreter of loopd's is started)."""
    return _WRAPPER.format(
        marker=MARKER,
        hook=shlex.quote(hook),
        stdin_hook="yes" if hook in STDIN_HOOKS else "no",
        inboxes=INBOXES_NAME,
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
    return MARKER_PREFIX.encode() in head


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


def _inboxes_text(config: dict) -> str:
    """The wrappers' list of inbox folders: one line for each home that has loops here."""
    homes = sorted(home for home, entry in config["homes"].items() if entry.get("loops"))
    return "".join(f"{Path(home) / 'state' / 'inbox'}\n" for home in homes)


def _write_config(folder: Path, config: dict) -> list[Path]:
    """Write loopd-hooks.json and the wrappers' inbox list beside it; the files changed."""
    changed = []
    for name, text in ((CONFIG_NAME, _config_text(config)), (INBOXES_NAME, _inboxes_text(config))):
        path = folder / name
        try:
            same = path.read_text(encoding="utf-8") == text
        except OSError:
            same = False
        if not same:
            _write_file(path, text, 0o600)
            changed.append(path)
    return changed


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


def git_runs_reference_transaction(repo: Path) -> bool:
    """Whether the git on PATH runs the reference-transaction hook (2.28 and later)."""
    text = _git(repo, "version")  # "git version 2.39.5", "git version 2.39.5.windows.1"
    try:
        major, minor = (int(x) for x in text.split()[2].split(".")[:2])
    except (IndexError, ValueError):
        return True  # an unknown form: a recent git
    return (major, minor) >= REFERENCE_TRANSACTION_GIT


def install_hooks(
    home: Path,
    repo: Path,
    loops: Mapping[str, Sequence[str]],
    replace: bool = False,
    reference_transaction: bool | None = None,
) -> list[Path]:
    """Install the hooks in `repo` for `loops` (name -> on_push globs); the files changed.

    Existing hooks are moved to HOOK.loopd-orig and chained. Installing again with the same
    loops changes nothing. `replace` drops this home's other loops of this repository.
    `reference_transaction` (default: ask git) leaves out the commit hooks it makes needless.
    """
    home = Path(home).resolve()
    repo = Path(repo).resolve()
    if "\n" in str(home) or "\r" in str(home):
        raise HookError(f"{home}: a home whose path holds a line break cannot be hooked; move it")
    folder = hooks_dir(repo)
    git_dir = str(common_git_dir(repo))
    folder.mkdir(parents=True, exist_ok=True)
    changed: list[Path] = []
    if reference_transaction is None:
        reference_transaction = git_runs_reference_transaction(repo)
    wanted = REFS_HOOKS if reference_transaction else HOOK_NAMES

    # Check every hook before touching any, so a conflict leaves the folder as it was.
    for hook in wanted:
        path, orig = folder / hook, folder / f"{hook}{ORIG_SUFFIX}"
        exists = path.exists() or path.is_symlink()
        if (orig.exists() or orig.is_symlink()) and not (exists and is_wrapper(path)):
            raise HookError(
                f"{orig} exists but {path} is not loopd's wrapper; keep the hook you want "
                f"as {path}, remove {orig}, and run `loopd hooks install` again"
            )

    for hook in HOOK_NAMES:
        if hook not in wanted:
            changed.extend(_put_back(folder, hook))  # an older loopd's, or an older git's
            continue
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
    entry = config["homes"].setdefault(str(home), {"loops": {}})
    entry.setdefault("loops", {})
    if replace:
        for name in [n for n, s in entry["loops"].items() if s.get("git_dir") == git_dir]:
            del entry["loops"][name]
    for name, globs in loops.items():
        entry["loops"][name] = {"git_dir": git_dir, "globs": list(globs)}
    changed.extend(_write_config(folder, config))
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
            changed.extend(_write_config(folder, config))
        return changed

    for hook in HOOK_NAMES:
        changed.extend(_put_back(folder, hook))
    for leftover in (config_path, folder / INBOXES_NAME, folder / hook_script.LOG_NAME):
        if leftover.exists():
            leftover.unlink()
            changed.append(leftover)
    return changed


def _put_back(folder: Path, hook: str) -> list[Path]:
    """Replace loopd's wrapper of `hook` by the hook that was there before (or by none)."""
    path, orig = folder / hook, folder / f"{hook}{ORIG_SUFFIX}"
    if not is_wrapper(path):
        return []  # not ours (any more): leave it and its .loopd-orig alone
    if orig.exists() or orig.is_symlink():
        os.replace(orig, path)
    else:
        path.unlink()
    return [path]


def inside_work_tree(repo: Path, folder: Path) -> bool:
    """Whether the hooks folder lies in the work tree (a tracked core.hooksPath, say)."""
    repo = Path(repo).resolve()
    return folder == repo or repo in folder.parents and ".git" not in folder.relative_to(repo).parts
