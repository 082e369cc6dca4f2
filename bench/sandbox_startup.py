"""What the sandbox adds to starting an agent: bubblewrap against no sandbox, same run.

Target: at most 50 ms added (median) on a 2-core machine.
A real home, repository and worktree; the run's confinement as loopd builds it (the mount
plan of a real run: masks, the repository and its git folder, the agent's installation, the
tree, scratch and HOME). Each of N starts (default 50, alternating) times from building the
launch to the agent's first statement (a `python3 -I -S` that prints `time.time()`), with
bubblewrap and without; the difference of the medians is what the sandbox adds.
Usage: python bench/sandbox_startup.py [--starts N] [--smoke]
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from verdict import verdict  # noqa: E402

from daemon.git.tree import prepare_tree  # noqa: E402
from daemon.git.userrepo import LedgerWriter  # noqa: E402
from daemon.home import Home  # noqa: E402
from daemon.runparts.confinement import Confinement  # noqa: E402
from daemon.runparts.services import RunServices  # noqa: E402
from daemon.runs.executor import new_run  # noqa: E402
from daemon.sandbox.off import OffSandbox  # noqa: E402
from daemon.scheduling.queue import PendingRun  # noqa: E402
from daemon.state.ledger import ledger_of  # noqa: E402
from daemon.state.records import Trigger  # noqa: E402
from tests.helpers import make_home, make_repo  # noqa: E402

AGENT = [sys.executable, "-I", "-S", "-c", "import time; print(repr(time.time()))"]


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(p / 100 * len(ordered))))
    return ordered[rank - 1]


def start(confinement: Confinement, env: dict[str, str]) -> float:
    """One agent start: ms from building the launch to the agent's first statement."""
    began = time.time()
    launch = confinement.launch_agent(list(AGENT), env, declared=[])
    proc = subprocess.run(
        launch.argv,
        env=launch.env,
        pass_fds=launch.pass_fds,
        cwd=confinement.tree,
        capture_output=True,
        text=True,
        start_new_session=True,
    )
    launch.close()
    if proc.returncode != 0:
        raise SystemExit(f"the agent failed: {proc.stderr}")
    return (float(proc.stdout) - began) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=50)
    parser.add_argument("--smoke", action="store_true", help="a few starts: that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.starts = 3
    tmp = Path(tempfile.mkdtemp(prefix="loopd-sbx-bench-"))
    try:
        repo = make_repo(tmp / "repo", {"README.md": "bench\n"})
        config = f'[agents.bench]\nadapter = "command"\ncommand = {AGENT!r}\n'.replace("'", '"')
        loop = f'repo = "{repo}"\ntask = "Measure the sandbox."\nagent = "bench"\n'
        home = Home(make_home(tmp / "home", config, {"bench": loop}))
        loaded = home.load()
        services = RunServices(home=home, config=loaded.daemon, store=home.state())
        now = datetime.now(UTC)
        pending = PendingRun(
            id=services.store.new_run_id("bench", now),
            loop="bench",
            trigger=Trigger(loop="bench", kind="manual", reason="bench", ts=now),
            queued_at=now,
        )
        run = new_run(services, loaded.loops["bench"], pending)
        limits = loaded.daemon.limits
        writer = LedgerWriter(ledger_of(services.store.root), services.clock, run.id)
        worktrees = limits.worktrees_path
        tree = prepare_tree(repo, "bench", run.id, "worktree", "HEAD", worktrees, writer)
        confined = Confinement.for_run(services, loaded.loops["bench"].config, run, tree.path)
        if confined.choice.name != "bwrap":
            raise SystemExit(f"no bubblewrap here: {confined.choice.summary()}")
        plain = Confinement(**{**confined.__dict__, "sandbox": OffSandbox()})
        home_dir = confined.agent_home
        home_dir.mkdir(parents=True, exist_ok=True)
        env = confined.agent_env({}, {}, home_dir, withhold=[])
        times: dict[str, list[float]] = {"bwrap": [], "off": []}
        for n in range(args.starts * 2):
            name = "bwrap" if n % 2 == 0 else "off"
            times[name].append(start(confined if name == "bwrap" else plain, env))
        argv = confined.launch_agent(list(AGENT), env, declared=[])
        mounts = sum(a in ("--tmpfs", "--bind", "--ro-bind") for a in argv.argv)
        argv.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"agent start, {args.starts} each, building the launch -> the agent's first statement:")
    for name in ("off", "bwrap"):
        values = times[name]
        print(
            f"  {name:5s}  median {statistics.median(values):6.1f} ms  p90 "
            f"{percentile(values, 90):6.1f}  max {max(values):6.1f}"
        )
    added = statistics.median(times["bwrap"]) - statistics.median(times["off"])
    added_p90 = percentile(times["bwrap"], 90) - percentile(times["off"], 90)
    print(f"  the sandbox adds {added:.1f} ms at the median, {added_p90:.1f} ms at p90")
    print(f"  ({mounts} mounts in the plan)   target <= 50 ms")
    figure = f"bubblewrap adds {added:.1f} ms to an agent's start (median)"
    return verdict(figure, "<= 50 ms", added <= 50, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
