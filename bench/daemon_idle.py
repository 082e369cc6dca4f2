"""The daemon idle with 20 loops watched: its RSS and CPU.

Target: RSS <= 100 MB and CPU <= 1% of one core on a 2-core machine.
A home with 20 loops, each on its own real git repository, enabled, with a schedule that does
not fire during the measurement (`0 3 1 1 *`): loops 0, 3, 6, ... have `on_push` (hooks
installed by `loopd hooks install`), loops 1, 4, 7, ... `on_change = ["src/**"]` (so the
change watchers run), loops 2, 5, 8, ... both. `loopd run` starts as a real process, settles,
then is sampled: RSS from /proc/PID/status VmRSS (plus any live descendants), CPU as
utime+stime from /proc/PID/stat (plus descendants, live and reaped) over the window, as a
percentage of one core.
Usage: python bench/daemon_idle.py [--loops 20] [--settle 5] [--window 30] [--keep] [--smoke]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from verdict import verdict  # noqa: E402

from tests.helpers import make_home, make_repo, start_daemon, stop_daemon  # noqa: E402

TARGET_RSS_MB = 100.0
TARGET_CPU_PERCENT = 1.0
TICKS = os.sysconf("SC_CLK_TCK")


def repo_files(index: int) -> dict[str, str]:
    """A small but not trivial tree: source folders, tests, docs and an ignored folder."""
    files = {".gitignore": "build/\nnode_modules/\n", "README.md": f"repo {index}\n"}
    for pkg in range(5):
        for mod in range(8):
            files[f"src/pkg{pkg}/mod{mod}.py"] = f"def f{mod}():\n    return {mod}\n"
    for n in range(10):
        files[f"tests/test_{n}.py"] = f"def test_{n}():\n    assert True\n"
        files[f"docs/page{n}.md"] = f"# page {n}\n"
    return files


def loop_text(repo: Path, index: int) -> str:
    lines = [
        f"repo = {json.dumps(str(repo))}",
        f'task = "Idle benchmark loop {index}."',
        'agent = "idle"',
        'schedule = ["0 3 1 1 *"]',
        'critic = "off"',
        'catch_up = "0s"',
    ]
    if index % 3 in (0, 2):
        lines.append('on_push = ["main"]')
    if index % 3 in (1, 2):
        lines.append('on_change = ["src/**"]')
    return "\n".join(lines) + "\n"


def descendants(pid: int) -> list[int]:
    """Live descendants of `pid`, through every thread's children list."""
    out: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as fh:
                    kids = [int(k) for k in fh.read().split()]
            except (FileNotFoundError, ProcessLookupError):
                continue
            out += kids
            todo += kids
    return out


def status_fields(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return dict(line.split(":", 1) for line in fh if ":" in line)
    except (FileNotFoundError, ProcessLookupError):
        return {}


def kb(fields: dict[str, str], key: str) -> int:
    value = fields.get(key, "0 kB").split()
    return int(value[0]) if value else 0


def cpu_ticks(pid: int, with_reaped: bool) -> int:
    """utime+stime of `pid` (and cutime+cstime: its reaped children) in clock ticks."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    # After the ")" field 3 (state) is index 0: utime=14, stime=15, cutime=16, cstime=17.
    ticks = int(fields[11]) + int(fields[12])
    if with_reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks


def tree_ticks(pid: int) -> int:
    """The daemon's CPU with its reaped children, plus its live descendants' own."""
    return cpu_ticks(pid, with_reaped=True) + sum(
        cpu_ticks(child, with_reaped=False) for child in descendants(pid)
    )


def tree_rss_kb(pid: int) -> tuple[int, dict[str, int]]:
    """VmRSS of the daemon plus its live descendants; the daemon's own breakdown."""
    own = status_fields(pid)
    total = kb(own, "VmRSS") + sum(kb(status_fields(c), "VmRSS") for c in descendants(pid))
    detail = {key: kb(own, key) for key in ("VmRSS", "RssAnon", "RssFile", "VmHWM", "VmSize")} | {
        "Threads": int(own.get("Threads", "0").strip() or 0)
    }
    return total, detail


def inotify_watches(pid: int) -> tuple[int, int]:
    """(inotify instances, watches) the daemon holds: proof that the watchers are live."""
    instances = watches = 0
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except FileNotFoundError:
        return 0, 0
    for fd in fds:
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as fh:
                lines = [line for line in fh if line.startswith("inotify wd:")]
        except (FileNotFoundError, ProcessLookupError):
            continue
        try:
            is_inotify = os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify"
        except OSError:
            is_inotify = False
        instances += is_inotify
        watches += len(lines)
    return instances, watches


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=20)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds before sampling")
    parser.add_argument("--window", type=float, default=30.0, help="CPU window in seconds")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--smoke", action="store_true", help="two loops, seconds: that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.loops, args.settle, args.window = 2, 1.0, 2.0

    tmp = Path(tempfile.mkdtemp(prefix="loopd-bench-idle-"))
    daemon = None
    try:
        repos = [make_repo(tmp / f"repo{i:02d}", repo_files(i)) for i in range(args.loops)]
        config = (
            '[agents.idle]\nadapter = "command"\n'
            f"command = {json.dumps([sys.executable, '-c', 'pass'])}\n"
        )
        loops = {f"loop{i:02d}": loop_text(repo, i) for i, repo in enumerate(repos)}
        home = make_home(tmp / "home", config, loops)
        install = subprocess.run(
            [sys.executable, "-m", "daemon.cli.main", "--home", str(home), "hooks", "install"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if install.returncode != 0:
            raise SystemExit(f"loopd hooks install failed: {install.stderr}")
        n_push = sum(1 for t in loops.values() if "on_push" in t)
        n_change = sum(1 for t in loops.values() if "on_change" in t)

        started = time.monotonic()
        daemon = start_daemon(home)
        ready = time.monotonic() - started
        time.sleep(args.settle)
        if daemon.poll() is not None:
            raise SystemExit(f"loopd run exited {daemon.returncode}")

        rss_samples: list[int] = []
        peak_children = 0
        t0, c0 = time.monotonic(), tree_ticks(daemon.pid)
        end = t0 + args.window
        while time.monotonic() < end:
            total, _ = tree_rss_kb(daemon.pid)
            rss_samples.append(total)
            peak_children = max(peak_children, len(descendants(daemon.pid)))
            time.sleep(1.0)
        t1, c1 = time.monotonic(), tree_ticks(daemon.pid)
        final_rss, detail = tree_rss_kb(daemon.pid)
        instances, watches = inotify_watches(daemon.pid)
        rss_samples.append(final_rss)
        cpu = (c1 - c0) / TICKS / (t1 - t0) * 100

        log = (home / "daemon.log").read_text()
        events = [
            json.loads(line)
            for line in (home / "state" / "events.jsonl").read_text().splitlines()
            if line.strip()
        ]
        kinds: dict[str, int] = {}
        for e in events:
            kinds[e["type"]] = kinds.get(e["type"], 0) + 1

        rss_mb = max(rss_samples) / 1024
        print(f"loopd run idle: {args.loops} loops ({n_push} on_push, {n_change} on_change)")
        print(f"  started (lock and status written) in {ready:.2f} s, settled {args.settle:g} s")
        print(
            f"  RSS   max {rss_mb:.1f} MB over {len(rss_samples)} samples "
            f"(final {final_rss / 1024:.1f} MB; daemon alone: anon {detail['RssAnon'] / 1024:.1f}"
            f" MB, file {detail['RssFile'] / 1024:.1f} MB, peak VmHWM "
            f"{detail['VmHWM'] / 1024:.1f} MB; {detail['Threads']} threads; "
            f"max live children {peak_children})"
        )
        print(
            f"  CPU   {cpu:.2f}% of one core over {t1 - t0:.1f} s "
            f"({c1 - c0} ticks at {TICKS}/s, daemon and children)"
        )
        print(f"  inotify: {instances} instances, {watches} watches")
        print(f"  events: {json.dumps(kinds, sort_keys=True)}")
        if log.strip():
            print("  daemon.log (last lines):")
            for line in log.strip().splitlines()[-5:]:
                print(f"    {line}")
        rss_ok = rss_mb <= TARGET_RSS_MB
        cpu_ok = cpu <= TARGET_CPU_PERCENT
        print(
            f"target RSS <= {TARGET_RSS_MB:g} MB: {'met' if rss_ok else 'MISSED'}; "
            f"CPU <= {TARGET_CPU_PERCENT:g}%: {'met' if cpu_ok else 'MISSED'}"
        )
        figure = f"idle daemon, {args.loops} loops: RSS {rss_mb:.0f} MB, CPU {cpu:.2f}%"
        target = f"RSS <= {TARGET_RSS_MB:g} MB, CPU <= {TARGET_CPU_PERCENT:g}%"
        return verdict(figure, target, rss_ok and cpu_ok, args.smoke)
    finally:
        if daemon is not None:
            stop_daemon(daemon)
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
