"""A commit to the agent's process start, through the git hooks and a running daemon.

Target: p99 <= 250 ms on a 2-core machine, no verifier configured.
A real repository with `loopd hooks install`, `loopd run` as a real process, a `command`
agent that writes `time.time()` first thing; each of N commits (default 50) is its own run:
the next commit waits until the daemon is idle again. Latency is measured from `git commit`
returning to the agent's first statement; the daemon's events give the breakdown.
Usage: python bench/trigger_latency.py [--commits N] [--keep] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
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

from tests.helpers import git, make_home, make_repo, start_daemon, stop_daemon  # noqa: E402

# The agent: no site import, so that interpreter start-up is as short as python allows.
AGENT = "import time; t = time.time(); open({log!r}, 'a').write(repr(t) + '\\n')"


def stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile: p99 of 50 values is the largest of them."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(p / 100 * len(ordered))))
    return ordered[rank - 1]


def wait(predicate, timeout: float = 60.0, what: str = ""):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.005)


def idle(home: Path, runs_done: int) -> bool:
    """The daemon reaped the run: status says idle and the runs have their outcomes."""
    try:
        status = tomllib.loads((home / "state" / "status.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return False
    loop = status.get("loops", {}).get("bench", {})
    finished = sum(
        1 for e in read_events(home) if e["type"] == "run_finished" and e.get("loop") == "bench"
    )
    return finished >= runs_done and loop.get("phase") == "idle" and not loop.get("run")


def read_events(home: Path) -> list[dict]:
    path = home / "state" / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def python_startup(runs: int = 20) -> float:
    """The agent's own start-up: spawn to its first statement, median, in ms."""
    out = []
    for _ in range(runs):
        before = time.time()
        proc = subprocess.run(
            [sys.executable, "-I", "-S", "-c", "import time; print(repr(time.time()))"],
            capture_output=True,
            text=True,
            check=True,
        )
        out.append((float(proc.stdout) - before) * 1000)
    return statistics.median(out)


def breakdown(home: Path, agent_starts: list[float], commits: list[dict]) -> list[dict]:
    """Per commit: when the hook wrote the trigger, the daemon took it, the run and attempt
    started (from the inbox file's `ts` and the events), and the agent started."""
    by_run: dict[str, dict[str, float]] = {}
    trigger_at: dict[str, float] = {}
    for e in read_events(home):
        if e["type"] == "trigger" and e.get("new"):
            trigger_at[e["new"]] = stamp(e["ts"])
        if e.get("run") and e["type"] in ("run_started", "attempt_started"):
            by_run.setdefault(e["run"], {})[e["type"]] = stamp(e["ts"])
    runs = {}
    for child in (home / "state" / "runs").iterdir():
        run = tomllib.loads((child / "run.toml").read_text())
        runs[run["trigger"]["new"]] = run
    out = []
    for commit, agent in zip(commits, agent_starts, strict=True):
        run = runs[commit["sha"]]
        hooked = run["trigger"]["ts"].timestamp() if run["trigger"].get("ts") else None
        marks = by_run[run["id"]]
        out.append(
            {
                "commit": (commit["after"] - commit["before"]) * 1000,
                "hook_written_after_commit_start": (hooked - commit["before"]) * 1000
                if hooked
                else float("nan"),
                "taken": (trigger_at[commit["sha"]] - (hooked or commit["after"])) * 1000,
                "queued_to_run_started": (marks["run_started"] - trigger_at[commit["sha"]]) * 1000,
                "prepare": (marks["attempt_started"] - marks["run_started"]) * 1000,
                "spawn": (agent - marks["attempt_started"]) * 1000,
                "latency": (agent - commit["after"]) * 1000,
            }
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=50)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--smoke", action="store_true", help="two commits: that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.commits = 2

    tmp = Path(tempfile.mkdtemp(prefix="loopd-bench-"))
    # The agent runs in the sandbox (the default): its log's folder is made writable for it.
    log = tmp / "talk" / "agent-starts.log"
    log.parent.mkdir()
    repo = make_repo(tmp / "repo", {"README.md": "bench\n"})
    argv = [sys.executable, "-I", "-S", "-c", AGENT.format(log=str(log))]
    config = (
        f'[agents.bench]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'
        f'\n[sandbox]\nwritable = ["{log.parent}"]\n'
    )
    loop = (
        f"repo = {json.dumps(str(repo))}\n"
        'task = "Measure the trigger latency."\n'
        'agent = "bench"\non_push = ["main"]\nmax_attempts = 1\nmax_nudges = 0\n'
        'critic = "off"\n'
        # Measured without `setup` and without the done check a run makes before its agent
        # (bench/skip.py measures a skipped run).
        "skip_if_done = false\n"
    )
    home = make_home(tmp / "home", config, {"bench": loop})
    install = subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", "--home", str(home), "hooks", "install"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if install.returncode != 0:
        raise SystemExit(install.stderr)
    daemon = start_daemon(home)
    commits: list[dict] = []
    try:
        for n in range(args.commits):
            time.sleep(0.1)  # let the previous run's tail (worktree removal, status) settle
            before = time.time()
            git(repo, "commit", "-q", "--allow-empty", "-m", f"bench {n}")
            after = time.time()
            commits.append(
                {"before": before, "after": after, "sha": git(repo, "rev-parse", "HEAD")}
            )
            wait(
                lambda n=n: log.exists() and len(log.read_text().splitlines()) > n,
                what=f"the agent of commit {n}",
            )
            wait(lambda n=n: idle(home, n + 1), what=f"run {n} to end")
    finally:
        code = stop_daemon(daemon)
    starts = [float(x) for x in log.read_text().splitlines()]
    rows = breakdown(home, starts, commits)
    latencies = [r["latency"] for r in rows]
    outcomes = [e["outcome"] for e in read_events(home) if e["type"] == "run_finished"]
    sandbox = {e.get("in_force") for e in read_events(home) if e["type"] == "sandbox"}
    print(f"trigger latency, {len(latencies)} commits, git commit returned -> agent started:")
    print(f"  p50 {percentile(latencies, 50):7.1f} ms")
    print(f"  p99 {percentile(latencies, 99):7.1f} ms   (target <= 250 ms)")
    print(f"  max {max(latencies):7.1f} ms   min {min(latencies):.1f} ms")
    print(f"  first run (the daemon's lazy imports) {latencies[0]:.1f} ms")
    print("breakdown, median / p99 in ms:")
    for key in (
        "commit",
        "hook_written_after_commit_start",
        "taken",
        "queued_to_run_started",
        "prepare",
        "spawn",
    ):
        values = [r[key] for r in rows]
        print(f"  {key:34s} {statistics.median(values):7.1f} / {percentile(values, 99):7.1f}")
    print(f"  (python -I -S start-up alone: {python_startup():.1f} ms median)")
    print(f"runs: {len(outcomes)}, outcomes {sorted(set(outcomes))}; daemon exit code {code}")
    print(f"sandbox in force: {', '.join(sorted(sandbox)) or 'unknown'}")
    if args.keep:
        print(f"kept {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    p99 = percentile(latencies, 99)
    return verdict(
        f"commit to agent start: p99 {p99:.0f} ms", "p99 <= 250 ms", p99 <= 250, args.smoke
    )


if __name__ == "__main__":
    sys.exit(main())
