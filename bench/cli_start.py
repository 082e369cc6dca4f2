"""`loopd --help` and every command's `--help`: how soon the command line answers.

Target: each answers in <= 100 ms (median of R runs) on a 2-core machine. Each is a real
subprocess of the installed console script (`loopd --help`, `loopd status --help`, and each
subcommand of a group, `loopd escalations list --help`), timed from process start to exit:
its wall time, and its CPU time (user + system, from the kernel's accounting of the child),
which a busy machine does not inflate as it does the wall time. `python -c pass` is the floor.
The verdict is the worst median wall time. The children may write bytecode caches
(PYTHONDONTWRITEBYTECODE is dropped from their environment), as an installed loopd has them.
The load average is printed beside the figures: past the number of cores, every wall time
here grows with it.
Usage: python bench/cli_start.py [--repeat 7] [--only COMMAND ...] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from verdict import verdict  # noqa: E402

from daemon.cli.main import build_parser  # noqa: E402

TARGET_MS = 100.0


def loopd_argv() -> list[str]:
    """The installed console script next to this interpreter, else `python -m`."""
    script = Path(sys.executable).parent / "loopd"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "daemon.cli.main"]


def command_lines(only: list[str]) -> list[list[str]]:
    """`--help`, each command's `--help`, and each subcommand's of the groups that have them."""
    lines: list[list[str]] = [] if only else [[]]
    for name, command in subparsers(build_parser())[0].choices.items():
        if only and name not in only:
            continue
        lines.append([name])
        for group in subparsers(command):
            lines += [[name, action] for action in group.choices]
    return [[*line, "--help"] for line in lines]


def subparsers(parser: argparse.ArgumentParser) -> list[argparse._SubParsersAction]:
    return [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]


def timed(argv: list[str], repeat: int, cwd: Path) -> tuple[list[float], list[float], int]:
    """Wall and CPU times in ms of `argv`, `repeat` times after one warm-up; its exit code."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run(argv, capture_output=True, cwd=cwd, timeout=120, env=env)
    walls, cpus = [], []
    code = 0
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, cwd=cwd, timeout=120, env=env)
        walls.append((time.perf_counter() - began) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        cpus.append(cpu * 1000)
        code = code or proc.returncode
    return walls, cpus, code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--only", nargs="*", default=[], help="these commands only")
    parser.add_argument("--smoke", action="store_true", help="each once: that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.repeat = 1
    base = loopd_argv()
    rows: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="loopd-bench-cli-") as tmp:
        cwd = Path(tmp)  # no home here: `--help` must not need one
        floor, floor_cpu, _ = timed([sys.executable, "-c", "pass"], args.repeat, cwd)
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(
            f"  {'python -c pass (the floor)':<34} wall {statistics.median(floor):6.1f} ms   "
            f"cpu {statistics.median(floor_cpu):6.1f} ms"
        )
        print(f"  command: {' '.join(base)} ...")
        for line in command_lines(args.only):
            walls, cpus, code = timed([*base, *line], args.repeat, cwd)
            if code != 0:
                raise SystemExit(f"loopd {' '.join(line)} exited {code}")
            name = "loopd " + " ".join(line)
            wall, cpu = statistics.median(walls), statistics.median(cpus)
            rows.append((name, wall, cpu))
            print(f"  {name:<34} wall {wall:6.1f} ms   cpu {cpu:6.1f} ms   (max {max(walls):.0f})")
    walls = [r[1] for r in rows]
    worst = max(rows, key=lambda r: r[1])
    ok = worst[1] <= TARGET_MS
    print(
        f"{len(rows)} command lines: median wall {statistics.median(walls):.1f} ms, worst "
        f"{worst[1]:.1f} ms ({worst[0]}); cpu median {statistics.median(r[2] for r in rows):.1f}"
        f" ms, worst {max(r[2] for r in rows):.1f} ms"
    )
    figure = (
        f"{len(rows)} --help lines: median {statistics.median(walls):.0f} ms, worst "
        f"{worst[1]:.0f} ms ({worst[0]}); load {os.getloadavg()[0]:.1f}"
    )
    return verdict(figure, f"<= {TARGET_MS:g} ms each", ok, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
