"""What loopd's git hooks cost `git commit`: the same commit with and without them.

Target: median difference <= 15 ms (issue 42 point 10).
Two real repositories made alike; one has `loopd hooks install` for a loop watching `main`
(so every commit here is a trigger the hooks must hand over), the other no hooks at all.
Each pair commits once in each, in alternating order, so load on the machine falls on both
sides alike; the figure is the median of the pairs' differences. No daemon runs: what the
hooks leave waits in the inbox, as it would while loopd is stopped; at the end the bench
makes the triggers of it as the daemon's intake does and checks one per commit.
Usage: python bench/hook_cost.py [--pairs N] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from verdict import verdict  # noqa: E402

from daemon.scheduling.hook_script import take_records  # noqa: E402
from tests.helpers import make_home, make_repo  # noqa: E402

TARGET_MS = 15.0
AGENT = '[agents.a]\nadapter = "command"\ncommand = ["true"]\n'


def commit_ms(repo: Path, n: int, env: dict[str, str]) -> float:
    """One `git commit` in `repo`, wall time in ms (git's own process, its hooks included)."""
    argv = ["git", "commit", "-q", "--allow-empty", "-m", f"bench {n}"]
    before = time.perf_counter()
    subprocess.run(argv, cwd=repo, env=env, check=True, stdin=subprocess.DEVNULL)
    return (time.perf_counter() - before) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--smoke", action="store_true", help="ten pairs: that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.pairs = 10
    tmp = Path(tempfile.mkdtemp(prefix="loopd-hook-cost-"))
    try:
        plain = make_repo(tmp / "plain")
        hooked = make_repo(tmp / "hooked")
        loop = f'repo = {json.dumps(str(hooked))}\ntask = "t"\nagent = "a"\non_push = ["main"]\n'
        home = make_home(tmp / "home", AGENT, {"app": loop})
        install = subprocess.run(
            [sys.executable, "-m", "daemon.cli.main", "--home", str(home), "hooks", "install"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if install.returncode != 0:
            raise SystemExit(install.stderr)
        env = dict(os.environ)
        env.update(
            GIT_AUTHOR_NAME="Bench",
            GIT_AUTHOR_EMAIL="bench@example.com",
            GIT_COMMITTER_NAME="Bench",
            GIT_COMMITTER_EMAIL="bench@example.com",
            GIT_CONFIG_NOSYSTEM="1",
        )
        for n in range(3):  # warm the page cache and git's own start on both sides
            commit_ms(plain, -n, env)
            commit_ms(hooked, -n, env)
        without: list[float] = []
        with_hooks: list[float] = []
        for n in range(args.pairs):
            if n % 2:
                with_hooks.append(commit_ms(hooked, n, env))
                without.append(commit_ms(plain, n, env))
            else:
                without.append(commit_ms(plain, n, env))
                with_hooks.append(commit_ms(hooked, n, env))
        # Let anything the hooks left in the background finish before the home is counted.
        time.sleep(1.0)
        inbox = home / "state" / "inbox"
        waiting = [p for p in inbox.iterdir() if p.is_file()]
        # What the daemon's intake makes of them: one push trigger per commit on main.
        take_records(str(inbox))
        triggers = [p for p in inbox.glob("*.json") if not p.name.startswith(".")]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    diffs = [a - b for a, b in zip(with_hooks, without, strict=True)]
    median = statistics.median(diffs)
    load = os.getloadavg()[0]
    print(f"git commit with and without loopd's hooks, {args.pairs} pairs (load {load:.1f}):")
    print(f"  without hooks  median {statistics.median(without):6.1f} ms")
    print(f"  with hooks     median {statistics.median(with_hooks):6.1f} ms")
    print(f"  difference     median {median:6.1f} ms   (target <= {TARGET_MS:.0f} ms)")
    commits = args.pairs + 3
    print(f"  files the hooks left in the inbox by the time git returned: {len(waiting)}")
    print(f"  push triggers made of them: {len(triggers)} for {commits} commits")
    if len(triggers) != commits:
        raise SystemExit("the hooks lost or doubled a trigger")
    return verdict(
        f"hooks add {median:.1f} ms to git commit (median)",
        f"<= {TARGET_MS:.0f} ms",
        median <= TARGET_MS,
        args.smoke,
    )


if __name__ == "__main__":
    sys.exit(main())
