"""The aftermath's cost: landed runs followed across a target with many later commits.

A real git repository (one `git fast-import`): F files, then R landed runs (loopd's commits,
each adding lines to one file, its message naming the run), then C later commits by a person,
each appending a line to one file. First every run's aftermath is brought up to date from
scratch (`sweep`, as `loopd aftermath` does: each run's identity read, its files' later
commits read): seconds. Then the daemon's path, its Follower (service/aftermath.py) on a
home whose state/ holds the runs: its first look, then one new target commit at a time, N
times, each marked moved as a push trigger or a fetch of the remote feed marks it, one tick
and its look: milliseconds per new commit, median (target <= 50 ms). The states are
checked: every run's lines still there (the later commits only append), no look failed.
Usage: python bench/aftermath.py [--runs 1000] [--commits 20000] [--files 200] [--new 20]
       [--smoke]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from verdict import verdict  # noqa: E402

from daemon.aftermath.sweep import sweep  # noqa: E402
from daemon.home import Home  # noqa: E402
from daemon.runparts.services import RunServices  # noqa: E402
from daemon.service.aftermath import Follower  # noqa: E402
from daemon.service.context import Context, Flags  # noqa: E402
from daemon.state.records import RunRecord, RunTrigger  # noqa: E402
from tests.helpers import git, make_home  # noqa: E402

TARGET_MS = 50.0
T0 = datetime(2030, 1, 1, tzinfo=UTC)
LOOPD = "loopd <loopd@localhost>"
PERSON = "Ann <ann@example.com>"
LATER = 1_850_000_000  # the new commits' dates: after every commit `build` writes (1.8e9 on)


def _blob(text: str) -> str:
    data = text.encode()
    return f"data {len(data)}\n{text}\n"


def build(repo: Path, files: int, runs: int, commits: int) -> list[str]:
    """The repository; returns each run's commit, in order."""
    rng = random.Random(7)
    content = {f"src/m{i:04d}.py": [f"# module {i}", f"X{i} = {i}"] for i in range(files)}
    out, stamp, mark = [], 1_800_000_000, 0

    def commit(who: str, message: str, path: str) -> None:
        nonlocal stamp, mark
        mark += 1
        stamp += 60
        out.append(
            f"commit refs/heads/main\nmark :{mark}\nauthor {who} {stamp} +0000\n"
            f"committer {who} {stamp} +0000\n{_blob(message)}"
        )
        if mark > 1:
            out.append(f"from :{mark - 1}\n")
        out.append(f"M 100644 inline {path}\n{_blob(chr(10).join(content[path]) + chr(10))}")

    mark += 1  # the first commit holds every file
    stamp += 60
    out.append(
        f"commit refs/heads/main\nmark :{mark}\nauthor {PERSON} {stamp} +0000\n"
        f"committer {PERSON} {stamp} +0000\n{_blob('initial')}"
    )
    for path, lines in content.items():
        out.append(f"M 100644 inline {path}\n{_blob(chr(10).join(lines) + chr(10))}")
    run_marks = []
    for n in range(runs):
        path = f"src/m{n % files:04d}.py"
        content[path] += [f"def run_{n}():"] + [f"    v{k} = {n * 10 + k}" for k in range(4)]
        commit(LOOPD, f"loopd(bench): task {n} (run RUN-{n:05d}, attempt 1: checks pass)", path)
        run_marks.append(mark)
    for n in range(commits):
        path = f"src/m{rng.randrange(files):04d}.py"
        content[path].append(f"Y{n} = {n}")
        commit(PERSON, f"person's change {n}", path)
    marks = repo / "marks"
    subprocess.run(
        ["git", "fast-import", "--quiet", f"--export-marks={marks}"],
        cwd=repo, input="".join(out).encode(), check=True,
    )  # fmt: skip
    by_mark = dict(line.split() for line in marks.read_text().splitlines())
    return [by_mark[f":{m}"] for m in run_marks]


AGENTS = f'[agents.quick]\nadapter = "command"\ncommand = ["{sys.executable}", "-c", "pass"]\n'


def _loop(repo: Path) -> str:
    """The loop the runs are of: landing by merge on the bench's repository."""
    return f'repo = "{repo}"\ntask = "bench"\nagent = "quick"\nland = "merge"\n'


def records(repo: Path, shas: list[str]) -> list[RunRecord]:
    return [
        RunRecord(
            id=f"20300101T000000Z-bench-{n:05d}",
            loop="bench",
            task=f"task {n}",
            trigger=RunTrigger(kind="manual"),
            started=T0,
            finished=T0,
            outcome="succeeded",
            repo=str(repo),
            land="merge",
            target="main",
            target_commit=f"{sha}~1",
            base_commit=f"{sha}~1",
            landed=True,
            landed_as=sha,
            landed_how="merge",
        )
        for n, sha in enumerate(shas)
    ]


def new_commit(repo: Path, n: int, files: int) -> None:
    """One more person's commit on main: a line appended to one file, dated after the
    history `build` wrote (as a new commit is: a commit dated before its parent makes every
    git walk of a range look further back for the clock skew)."""
    path = repo / f"src/m{n * 7 % files:04d}.py"
    path.write_text(path.read_text() + f"Z{n} = {n}\n")
    when = f"@{LATER + 60 * n} +0000"
    env = dict(os.environ, GIT_AUTHOR_DATE=when, GIT_COMMITTER_DATE=when, GIT_CONFIG_NOSYSTEM="1")
    name, _, email = PERSON.partition(" <")
    env.update(GIT_AUTHOR_NAME=name, GIT_COMMITTER_NAME=name)
    env.update(GIT_AUTHOR_EMAIL=email[:-1], GIT_COMMITTER_EMAIL=email[:-1])
    proc = subprocess.run(
        ["git", "commit", "-qam", f"new change {n}"], cwd=repo, env=env, capture_output=True
    )
    assert proc.returncode == 0, proc.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--commits", type=int, default=20_000)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--new", type=int, default=20)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.commits, args.files, args.new = 20, 200, 10, 3
    with tempfile.TemporaryDirectory(prefix="loopd-bench-aftermath-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        started = time.monotonic()
        shas = build(repo, args.files, args.runs, args.commits)
        git(repo, "reset", "-q", "--hard", "main")
        print(f"repository: {args.runs} runs, {args.commits} later commits "
              f"({time.monotonic() - started:.1f} s to write)")  # fmt: skip
        home = Home(make_home(Path(tmp) / "home", AGENTS, {"bench": _loop(repo)}))
        store = home.state()
        runs = records(repo, shas)
        for run in runs:  # as landed: the daemon's Follower reads them from state/
            store.save_run(run)
        now = T0 + timedelta(hours=1)
        started = time.monotonic()
        first = sweep(store, runs, now)
        scratch = time.monotonic() - started
        assert not first.failed, first.failed
        states = {r.state for r in first.records}
        assert len(first.records) == args.runs and states <= {"kept", "edited"}, states
        # The later commits only append: every run's lines are all still there.
        assert all(r.lines_kept == r.lines_landed == 5 for r in first.records)
        print(f"from scratch: {scratch:.2f} s for {args.runs} runs")
        # The daemon's path: its Follower (service/aftermath.py) on a context of the home,
        # its first look over every landed run, then each new commit as a push trigger, a
        # hook or a fetch of the remote feed marks it: `targets_moved`, one tick, the look.
        loaded = home.load()
        ctx = Context(
            home=home,
            store=store,
            flags=Flags(),
            config=loaded,
            services=RunServices(home=home, config=loaded.daemon, store=store),
            clock=lambda: now,
            monotonic=lambda: 1000.0,  # it stands: no 5-minute look comes, only the moves
        )
        follower = Follower(ctx)
        follower.tick(now)
        follower.join()
        moved = (str(repo.resolve()), "main")
        times = []
        for n in range(args.new):
            new_commit(repo, n, args.files)
            started = time.monotonic()
            ctx.targets_moved.add(moved)
            follower.tick(now)
            follower.join()
            times.append((time.monotonic() - started) * 1000)
        follower.close()
        failed = [e for e in store.events.read() if e.get("type") == "aftermath_failed"]
        assert not failed, failed[:3]
        median = statistics.median(times)
        print(f"per new target commit: median {median:.1f} ms, max {max(times):.1f} ms "
              f"over {args.new} commits")  # fmt: skip
    return verdict(
        f"{median:.1f} ms per new commit ({args.runs} runs); {scratch:.1f} s from scratch",
        f"<= {TARGET_MS:.0f} ms",
        median <= TARGET_MS,
        args.smoke,
    )


if __name__ == "__main__":
    sys.exit(main())
