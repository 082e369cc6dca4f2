"""From writing a loop file to the running daemon having loaded it, with no signal sent.

Target: <= 5 s. `loopd run` starts as a real process on a home with one loop (and its
repository); then, `--rounds` times, a new loop file is written (atomically, as an editor
saves) and the clock runs until `state/status.toml` lists the loop, which the daemon
writes once its reload has loaded the file. Also measured: an edit of an existing loop
(until status.toml carries the edited file's digest).
Usage: python bench/reload_delay.py [--rounds 10] [--keep] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from verdict import verdict  # noqa: E402

from daemon.service.reload import file_digest  # noqa: E402
from tests.helpers import make_home, make_repo, start_daemon, stop_daemon  # noqa: E402

TARGET_SECONDS = 5.0
LIMIT = 30.0  # a round that takes longer than this is reported as a failure


def loop_text(repo: Path, task: str) -> str:
    return (
        f'repo = {json.dumps(str(repo))}\ntask = {json.dumps(task)}\nagent = "idle"\n'
        'critic = "off"\n'
    )


def save(path: Path, text: str) -> None:
    """Write as editors do: a temporary file renamed over the target."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def loops_in_status(home: Path) -> dict:
    try:
        return tomllib.loads((home / "state" / "status.toml").read_text()).get("loops", {})
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def until(predicate) -> float:  # noqa: ANN001
    """Seconds until `predicate()` holds (polled every 10 ms); LIMIT+ when it never does."""
    start = time.monotonic()
    while time.monotonic() - start < LIMIT:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.01)
    return float("inf")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--keep", action="store_true", help="keep the temporary home")
    parser.add_argument("--smoke", action="store_true", help="one round: that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.rounds = 1
    base = Path(tempfile.mkdtemp(prefix="loopd-reload-"))
    repo = make_repo(base / "repo")
    home = make_home(
        base / "home",
        '[agents.idle]\nadapter = "command"\ncommand = ["true"]\n',
        {"first": loop_text(repo, "The first loop.")},
    )
    daemon = start_daemon(home)
    added, edited = [], []
    try:
        for n in range(args.rounds):
            name = f"new{n}"
            path = home / "loops" / f"{name}.toml"
            save(path, loop_text(repo, f"Loop number {n}."))
            added.append(until(lambda name=name: name in loops_in_status(home)))
            first = home / "loops" / "first.toml"
            save(first, loop_text(repo, f"The first loop, edit {n}."))
            digest = file_digest(first)
            edited.append(
                until(lambda d=digest: loops_in_status(home).get("first", {}).get("digest") == d)
            )
    finally:
        stop_daemon(daemon)
        if args.keep:
            print(f"home kept at {home}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    ok = True
    for what, delays in (("new loop file", added), ("edited loop file", edited)):
        worst = max(delays)
        ok = ok and worst <= TARGET_SECONDS
        print(
            f"{what}: median {statistics.median(delays):.2f} s, max {worst:.2f} s over "
            f"{len(delays)} rounds (target <= {TARGET_SECONDS:g} s)"
        )
    worst = max(added + edited)
    figure = f"a loop file written to loaded: max {worst:.2f} s"
    return verdict(figure, f"<= {TARGET_SECONDS:g} s", ok, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
