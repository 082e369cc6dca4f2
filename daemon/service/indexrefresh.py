"""The hourly refresh of the run index, in a process of its own.

Bringing `state/runs-index.json` up to date parses every changed run record and the whole index
(a few megabytes of small objects at a few thousand runs); Python keeps the heap those leave
behind, so a daemon that did it itself grew by a step at each hourly refresh, more as runs were
kept (the soak of bench/soak.py). A child process does the same work and gives its memory back
when it ends. It writes only what `loopd branches` writes, from another process as that does.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from daemon.landing.branches import list_branches
from daemon.processes import run_in_own_group
from daemon.state.runindex import refresh
from daemon.state.store import StateStore

PR_SET_PDEATHSIG = 1

# A listing of ten thousand runs takes seconds; git on a huge repository a few minutes at most.
TIMEOUT = 1800.0


def refresh_apart(
    store: StateStore, repos: dict[str, Path], now: datetime, timeout: float = TIMEOUT
) -> str:
    """Refresh the run index and the branches' lines in a child process; "" when it did, else
    what went wrong (a cache: its readers rebuild what is stale)."""
    argv = [sys.executable, "-m", "daemon.service.indexrefresh", str(store.root), now.isoformat()]
    argv += [json.dumps({name: str(path) for name, path in repos.items()})]
    argv += ["--events-rotate", str(store.events.rotate_bytes), "--parent", str(os.getpid())]
    # loopd's own package found by the child however the daemon was started (a checkout on
    # PYTHONPATH, `python -m` from its folder, an install).
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    try:
        done = run_in_own_group(argv, env=env, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode != 0:
        return done.stderr.decode(errors="replace")[-500:] or f"exit {done.returncode}"
    return ""


def die_with_parent(parent: int) -> bool:
    """SIGKILL this process when `parent` (the thread that started it) ends; exit at once if it
    has already. False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:  # it ended before the line above: no signal will come
        os._exit(1)
    return True


def main(argv: list[str] | None = None) -> int:
    """Refresh a home's run index (STATE, NOW, REPOS as JSON): the daemon's child."""
    parser = argparse.ArgumentParser(prog="python -m daemon.service.indexrefresh")
    parser.add_argument("state_dir", type=Path)
    parser.add_argument("now", type=datetime.fromisoformat)
    parser.add_argument("repos", type=json.loads)
    parser.add_argument("--events-rotate", type=int, default=64_000_000)
    parser.add_argument("--parent", type=int, default=0, help="the daemon: ended with it")
    args = parser.parse_args(argv)
    if args.parent:
        # In a session of its own (run_in_own_group), so a stopped daemon's end never reached
        # it: it went on writing state/ after `loopd run` had exited (a home removed after the
        # stop was made again under the remover).
        die_with_parent(args.parent)
    store = StateStore(args.state_dir, events_rotate=args.events_rotate)
    refresh(store)
    list_branches(store, {name: Path(path) for name, path in args.repos.items()}, args.now)
    return 0


if __name__ == "__main__":
    sys.exit(main())
