"""A push to a green main: from the commit to the run's outcome `skipped` (no agent).

Target: <= 2 s on a 2-core machine. A real repository with `loopd hooks install`, `loopd run`
as a real process, a loop whose `done_when` (`python3 check.py`) already passes; each of N
commits (default 10) triggers a run that prepares its clone, runs the check in the sandbox,
ends `skipped` and deletes its empty branch. Measured from `git commit` returning to the
`run_finished` event; the events give the breakdown.
Usage: python bench/skip.py [--commits N] [--keep] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from verdict import verdict  # noqa: E402

from tests.helpers import git, loopd, make_home, make_repo, start_daemon, stop_daemon  # noqa: E402

AGENT = "open('/dev/null', 'w').write('an agent was started')"


def stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def read_events(home: Path) -> list[dict]:
    path = home / "state" / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait(predicate, timeout: float = 60.0, what: str = ""):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.005)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=10)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--smoke", action="store_true", help="one push: that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.commits = 1

    tmp = Path(tempfile.mkdtemp(prefix="loopd-bench-skip-"))
    repo = make_repo(
        tmp / "repo",
        {
            "calc.py": "def add(a, b):\n    return a + b\n",
            "check.py": "from calc import add\nassert add(2, 3) == 5\n",
        },
    )
    argv = [sys.executable, "-c", AGENT]
    config = f'[agents.bench]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'
    loop = (
        f"repo = {json.dumps(str(repo))}\n"
        'task = "Keep check.py passing."\n'
        'agent = "bench"\non_push = ["main"]\ndone_when = ["python3 check.py"]\n'
        'critic = "off"\n'
    )
    home = make_home(tmp / "home", config, {"bench": loop})
    if loopd(home, "hooks", "install").returncode != 0:
        raise SystemExit("loopd hooks install failed")
    daemon = start_daemon(home)
    seconds: list[float] = []
    steps: dict[str, list[float]] = {"to run_started": [], "check": [], "finish": []}
    try:
        for n in range(args.commits):
            time.sleep(0.2)
            git(repo, "commit", "-q", "--allow-empty", "-m", f"green {n}")
            committed = time.time()
            finished = wait(
                lambda n=n: [e for e in read_events(home) if e["type"] == "run_finished"][n:],
                what=f"the run of commit {n}",
            )[0]
            if finished["outcome"] != "skipped":
                raise SystemExit(f"run {finished['run']} ended {finished['outcome']}")
            seconds.append(stamp(finished["ts"]) - committed)
            mine = {e["type"]: stamp(e["ts"]) for e in read_events(home)
                    if e.get("run") == finished["run"]}  # fmt: skip
            steps["to run_started"].append(mine["run_started"] - committed)
            steps["check"].append(mine["done_check"] - mine["run_started"])
            steps["finish"].append(mine["run_finished"] - mine["done_check"])
    finally:
        stop_daemon(daemon)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    ordered = sorted(seconds)
    print(f"{len(seconds)} pushes to a green main, each run skipped (no agent)")
    print(
        f"commit to outcome: median {statistics.median(seconds):.2f} s, "
        f"max {ordered[-1]:.2f} s (target <= 2 s)"
    )
    for name, values in steps.items():
        print(f"  {name}: median {statistics.median(values) * 1000:.0f} ms")
    figure = f"a push to a green main to `skipped`: max {ordered[-1]:.2f} s"
    return verdict(figure, "<= 2 s", ordered[-1] <= 2.0, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
