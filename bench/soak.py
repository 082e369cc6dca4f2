"""A soak: loopd left alone with 20 loops and a push every 15 s, a kill -9 and a reload in the
middle; what it left behind checked at the end.

A generated home in a temporary folder: 20 loops, each on a real git repository of its own
(`loopd hooks install`), each with `on_push = ["main"]` and a command agent of one of five
behaviours, in turn: it succeeds (fixes the bug), it fails the checks (changes a file, not the
bug), it stalls (silent until killed), it changes nothing, it prints a lot (5 MB) and then
succeeds. Every `--push-every` seconds one repository, in turn, gets a commit on main.
Between 30% and 35% of the time (as soon as a run is live) `loopd run` is killed with SIGKILL
and started again; at 45% a loop file changes (the watcher reloads it) and the daemon gets
SIGHUP. After the time, pushes stop, the runs drain, and the daemon stops with SIGTERM.
Then, checked and printed:
- every push recorded: each commit the bench made is named (`new`) by a `trigger`,
  `trigger_merged` or `trigger_skipped` event of its loop;
- every run with an outcome;
- no escalation duplicated: at most one open escalation per loop (one task each);
- `state/` under `[limits] state_max` (set to its least, 100MB);
- packs per repository bounded (<= 60: `gc.autoPackLimit` is 50);
- RSS and open descriptors of the daemon sampled over time, the last third against the
  middle third (both after the restart): flat when the last third's median RSS is within
  2 MB of the middle third's and its median descriptor count within 8 of it (the RSS trend
  over the last two thirds, in MB per hour, is printed too).
`--smoke`: 5 loops (one of each behaviour), a push every 2 s for 60 s; CI runs it.
`--tracemalloc`: the daemon runs under tracemalloc and writes a snapshot when the middle third
begins (after the restart) and when the pushes stop (SIGUSR2); the growth between them is
printed, by line (RSS is then the traced daemon's, larger); and one every `--window` minutes
between them, each window's top growth printed by line, so that a long soak says where
memory grows and when. Without it, RSS is printed per window (its median, and the change
from the window before) for each life of the daemon.
`--one-life`: no kill -9 (the reload still comes): one daemon life, and the RSS trend after
its first hour is held to 5 MB an hour (#41's four-hour soak: `--minutes 240 --push-every 5
--one-life`, about 700 runs an hour). `--samples FILE` appends each sample as a JSON line as
it is taken.
Usage: python bench/soak.py [--minutes 60] [--loops 20] [--push-every 15] [--tracemalloc]
       [--window 10] [--keep] [--smoke] [--one-life] [--samples FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from verdict import verdict  # noqa: E402

from daemon.people.escalation_file import open_escalations  # noqa: E402
from daemon.state.store import StateStore  # noqa: E402
from tests.helpers import daemon_log, git, loopd, make_home, make_repo  # noqa: E402

STATE_MAX = 100 * 1000 * 1000  # "100MB", the least state_max allows
PACKS_BOUND = 60
RSS_SLACK_MB = 2.0  # the last third's median RSS over the middle third's: growth past this
RSS_HOURLY_MB = 5.0  # --one-life: the trend after the first hour, at most this (#41)
TAKEN = {"trigger", "trigger_merged", "trigger_skipped"}
BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5, f'add(2, 3) gave {add(2, 3)}'\n",
}
FIX = (
    "import pathlib; p = pathlib.Path('calc.py'); "
    "p.write_text(p.read_text().replace('a - b', 'a + b')); "
)
AGENTS = {
    "succeeds": FIX + "print('fixed calc.py')",
    "fails": (
        "import pathlib, time; pathlib.Path('notes.txt').write_text(str(time.time())); "
        "print('wrote notes.txt; calc.py looks fine to me')"
    ),
    "stalls": "import time; time.sleep(90)",
    "nothing": "print('nothing to do here')",
    "chatty": (
        FIX + "import sys\n"
        "for i in range(50000):\n"
        "    sys.stdout.write(f'step {i:06d}: ' + 'looked at calc.py again ' * 3 + '\\n')\n"
    ),
}
BEHAVIOURS = list(AGENTS)
# --tracemalloc: `loopd run` under tracemalloc; SIGUSR2 writes a snapshot into SNAPSHOTS.
TRACER = """
import os, signal, sys, time, tracemalloc
tracemalloc.start(int(os.environ.get("LOOPD_SOAK_FRAMES", "8")))
def dump(signum, frame):
    folder = os.environ["LOOPD_SOAK_SNAPSHOTS"]
    path = os.path.join(folder, f"{time.time():.3f}.snap")
    tracemalloc.take_snapshot().dump(path + ".partial")
    os.rename(path + ".partial", path)
signal.signal(signal.SIGUSR2, dump)
from daemon.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@dataclass
class Sample:
    at: float  # seconds since the soak began
    life: int  # 1 before the kill -9, 2 after
    rss_kb: int
    fds: int
    threads: int


@dataclass
class Soak:
    home: Path
    repos: dict[str, Path]
    pushes: dict[str, list[str]] = field(default_factory=dict)  # loop -> commits made
    snapshots: Path | None = None  # --tracemalloc: where the daemon writes its snapshots
    samples: list[Sample] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def loop_text(repo: Path, behaviour: str) -> str:
    lines = [
        f"repo = {json.dumps(str(repo))}",
        'task = "Make check.py pass."',
        f'agent = "{behaviour}"',
        'on_push = ["main"]',
        'done_when = ["python3 check.py"]',
        'critic = "off"',
        'attempt_timeout = "60s"',
        'stall_after = "5s"',
        "max_nudges = 0",
        "max_attempts = 2",
    ]
    return "\n".join(lines) + "\n"


def make_soak_home(tmp: Path, loops: int) -> Soak:
    config = ""
    for name, script in AGENTS.items():
        argv = [sys.executable, "-c", script]
        config += f'[agents.{name}]\nadapter = "command"\ncommand = {json.dumps(argv)}\n\n'
    config += f'[limits]\nworktrees = "{tmp / "worktrees"}"\nstate_max = "100MB"\n'
    repos = {f"loop{i:02d}": make_repo(tmp / f"repo{i:02d}", BUGGY) for i in range(loops)}
    texts = {
        name: loop_text(repo, BEHAVIOURS[i % len(BEHAVIOURS)])
        for i, (name, repo) in enumerate(repos.items())
    }
    home = make_home(tmp / "home", config, texts)
    install = loopd(home, "hooks", "install", timeout=300)
    if install.returncode != 0:
        raise SystemExit(f"loopd hooks install failed: {install.stdout}{install.stderr}")
    return Soak(home, repos, {name: [] for name in repos})


def start(home: Path, snapshots: Path | None = None) -> subprocess.Popen[str]:
    """`loopd run` as a real process, once its status names it (a loaded machine: 5 minutes)."""
    env = dict(os.environ)
    env.pop("LOOPD_HOME", None)
    program = ["-m", "daemon.cli.main"]
    if snapshots is not None:
        env["LOOPD_SOAK_SNAPSHOTS"] = str(snapshots)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        program = ["-c", TRACER]
    with open(home / "daemon.log", "a") as log:
        proc = subprocess.Popen(
            [sys.executable, *program, "--home", str(home), "run"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=ROOT,
        )
    status = home / "state" / "status.toml"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"loopd run exited {proc.returncode}: {daemon_log(home)[-3000:]}")
        if status.exists() and f"pid = {proc.pid}" in status.read_text():
            return proc
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"loopd run did not start: {daemon_log(home)[-3000:]}")


def sample(pid: int, began: float, life: int) -> Sample | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            fields = dict(line.split(":", 1) for line in fh if ":" in line)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return None
    rss = int(fields.get("VmRSS", "0 kB").split()[0])
    threads = int(fields.get("Threads", "0").strip() or 0)
    return Sample(time.monotonic() - began, life, rss, fds, threads)


def push(soak: Soak, loop: str, n: int) -> None:
    """A commit on main of `loop`'s repository: its hook writes the push trigger."""
    repo = soak.repos[loop]
    for _ in range(3):
        try:
            git(repo, "commit", "-q", "--allow-empty", "-m", f"soak push {n}")
            break
        except AssertionError as exc:  # a lock loopd held a moment: once more
            soak.notes.append(f"commit {n} on {loop} retried: {str(exc)[:120]}")
            time.sleep(0.5)
    else:
        return
    soak.pushes[loop].append(git(repo, "rev-parse", "HEAD").strip())


def reload_home(soak: Soak, daemon: subprocess.Popen[str]) -> None:
    """A loop file changed (the watcher) and SIGHUP (a reload of everything)."""
    stalling = [n for i, n in enumerate(soak.repos) if BEHAVIOURS[i % len(BEHAVIOURS)] == "stalls"]
    if stalling:
        path = soak.home / "loops" / f"{stalling[0]}.toml"
        path.write_text(path.read_text().replace('stall_after = "5s"', 'stall_after = "6s"'))
    daemon.send_signal(signal.SIGHUP)


def drive(
    soak: Soak,
    seconds: float,
    every: float,
    sample_every: float,
    window: float = 600.0,
    one_life: bool = False,
    stream: Path | None = None,
) -> subprocess.Popen[str]:
    """Pushes in turn, the kill -9 at 30% (not with `one_life`), the reload at 45%, samples
    throughout (each appended to `stream` as a JSON line as it is taken, so a soak cut short
    still says what it saw); with --tracemalloc a snapshot when the middle third begins, then
    every `window` seconds."""
    daemon = start(soak.home, soak.snapshots)
    began = time.monotonic()
    life, killed, reloaded, snapped, n = 1, one_life, False, False, 0
    next_snap = float("inf")
    next_push = next_sample = began
    loops = list(soak.repos)
    while (now := time.monotonic()) - began < seconds:
        elapsed = now - began
        live = soak.home / "state" / "live"
        running = live.is_dir() and any(live.iterdir())
        if not killed and (elapsed >= 0.35 * seconds or elapsed >= 0.30 * seconds and running):
            # With a run live when it can be: its retry after the restart is checked too.
            os.kill(daemon.pid, signal.SIGKILL)
            daemon.wait()
            print(
                f"  {elapsed:6.0f} s  kill -9 of the daemon (pid {daemon.pid}; "
                f"{'a run live' if running else 'no run live'})",
                flush=True,
            )
            down = time.monotonic()
            daemon, life, killed = start(soak.home, soak.snapshots), 2, True
            # The soak's clock stops while the daemon starts again (a loaded machine may take
            # a minute): the planned time is spent with a daemon running.
            gap = time.monotonic() - down
            began, next_push, next_sample = began + gap, next_push + gap, next_sample + gap
            print(f"  {elapsed:6.0f} s  started again in {gap:.0f} s (pid {daemon.pid})")
        if not reloaded and elapsed >= 0.45 * seconds:
            reload_home(soak, daemon)
            reloaded = True
            print(f"  {elapsed:6.0f} s  a loop file changed, and SIGHUP", flush=True)
        if soak.snapshots is not None and killed and not snapped and elapsed >= seconds / 3:
            snapshot(soak.snapshots, daemon)  # the middle third begins (after the restart)
            snapped = True
            next_snap = time.monotonic() + window
        if soak.snapshots is not None and snapped and now >= next_snap:
            snapshot(soak.snapshots, daemon)  # a window's end: its growth is printed
            next_snap = time.monotonic() + window
        if now >= next_push:
            push(soak, loops[n % len(loops)], n)
            n += 1
            next_push += every
        if now >= next_sample:
            got = sample(daemon.pid, began, life)
            if got is not None:
                soak.samples.append(got)
                if stream is not None:
                    with stream.open("a") as fh:
                        fh.write(json.dumps({**got.__dict__, "pushes": n}) + "\n")
            next_sample += sample_every
        if daemon.poll() is not None:
            raise SystemExit(f"loopd run exited {daemon.returncode}: {daemon_log(soak.home)}")
        time.sleep(0.2)
    if soak.snapshots is not None:
        snapshot(soak.snapshots, daemon)  # the end of the last third
    return daemon


def snapshot(folder: Path, daemon: subprocess.Popen[str]) -> Path | None:
    """Ask the daemon for a tracemalloc snapshot (SIGUSR2); its file, once written."""
    before = set(folder.glob("*.snap"))
    daemon.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        new = set(folder.glob("*.snap")) - before
        if new:
            return max(new)
        time.sleep(0.5)
    return None


def traced_growth(folder: Path) -> tuple[list[str], float]:
    """The growth between the first and last snapshot: the total, then the top ten lines;
    and the total in MB (nan: not compared)."""
    snaps = sorted(folder.glob("*.snap"))
    if len(snaps) < 2:
        return [f"tracemalloc: {len(snaps)} snapshots, none compared"], float("nan")
    first, last = (tracemalloc.Snapshot.load(str(p)) for p in (snaps[0], snaps[-1]))
    diffs = last.compare_to(first, "lineno")
    total = sum(d.size_diff for d in diffs)
    out = [f"tracemalloc: traced memory {total / 1e6:+.2f} MB from the middle third's start"]
    for d in diffs[:10]:
        where = d.traceback[0]
        out.append(f"  {d.size_diff / 1e3:+9.1f} KB  {d.count_diff:+6d}  {where}")
    return out, total / 1e6


def window_growth(folder: Path, top: int = 3) -> list[str]:
    """Each window between consecutive snapshots: its traced growth and its top lines."""
    snaps = sorted(folder.glob("*.snap"), key=lambda p: float(p.stem))
    if len(snaps) < 3:
        return []  # one window: the whole comparison says it
    out = ["tracemalloc by window (growth, then its largest lines):"]
    start = float(snaps[0].stem)
    before = tracemalloc.Snapshot.load(str(snaps[0]))
    for path in snaps[1:]:
        after = tracemalloc.Snapshot.load(str(path))
        diffs = after.compare_to(before, "lineno")
        total = sum(d.size_diff for d in diffs)
        out.append(f"  at {(float(path.stem) - start) / 60:6.1f} min: {total / 1e6:+.2f} MB")
        for d in diffs[:top]:
            out.append(f"    {d.size_diff / 1e3:+9.1f} KB  {d.count_diff:+6d}  {d.traceback[0]}")
        before = after
    return out


def rss_windows(samples: list[Sample], window: float) -> list[str]:
    """RSS per `window` seconds of each life: the median, and its change from the last."""
    out = [
        "RSS by window (median of the window's samples):",
        "  life  from (min)  RSS (MB)  change",
    ]
    last: dict[int, float] = {}
    rows: dict[tuple[int, int], list[int]] = {}
    for s in samples:
        rows.setdefault((s.life, int(s.at // window)), []).append(s.rss_kb)
    for (life, index), values in sorted(rows.items()):
        mb = statistics.median(values) / 1024
        change = f"{mb - last[life]:+7.1f}" if life in last else "      -"
        last[life] = mb
        out.append(f"  {life:4d}  {index * window / 60:10.1f}  {mb:8.1f}  {change}")
    return out


def drained(home: Path) -> bool:
    state = home / "state"
    inbox = [n for n in os.listdir(state / "inbox") if n.endswith((".json", ".hook"))]
    live = os.listdir(state / "live") if (state / "live").is_dir() else []
    queue = state / "queue.toml"
    pending = tomllib.loads(queue.read_text()).get("pending", []) if queue.exists() else []
    return not inbox and not live and not pending


def read_events(state: Path) -> list[dict]:
    out = []
    for path in sorted(state.glob("events*.jsonl")):
        for line in path.read_bytes().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def tree_size(path: Path) -> int:
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except FileNotFoundError:
                continue
    return total


def check_records(soak: Soak) -> tuple[dict[str, object], list[str]]:
    """The figures of what the soak left, and what is wrong with it."""
    state = soak.home / "state"
    events = read_events(state)
    taken = {(e.get("loop"), e.get("new")) for e in events if e.get("type") in TAKEN}
    pushed = [(loop, sha) for loop, shas in soak.pushes.items() for sha in shas]
    missing = [p for p in pushed if p not in taken]
    runs, retries, no_outcome, outcomes = 0, 0, [], {}
    for folder in sorted((state / "runs").iterdir()):
        record = folder / "run.toml"
        if not folder.is_dir() or not record.exists():
            continue
        runs += 1
        data = tomllib.loads(record.read_text())
        outcome = data.get("outcome")
        retries += data.get("trigger", {}).get("kind") == "retry"
        outcomes[outcome or "none"] = outcomes.get(outcome or "none", 0) + 1
        if not outcome:
            no_outcome.append(folder.name)
    open_by_loop: dict[str, int] = {}
    for meta in open_escalations(StateStore(state)):
        open_by_loop[meta.loop] = open_by_loop.get(meta.loop, 0) + 1
    duplicated = {loop: n for loop, n in open_by_loop.items() if n > 1}
    size = tree_size(state)
    packs = {
        loop: len(list((repo / ".git" / "objects" / "pack").glob("*.pack")))
        for loop, repo in soak.repos.items()
    }
    kinds: dict[str, int] = {}
    for e in events:
        kinds[e["type"]] = kinds.get(e["type"], 0) + 1
    tracebacks = daemon_log(soak.home).count("Traceback")
    figures = {
        "pushes": len(pushed),
        "unrecorded": len(missing),
        "runs": runs,
        "outcomes": outcomes,
        "retries (of interrupted runs)": retries,
        "open escalations": sum(open_by_loop.values()),
        "state bytes": size,
        "packs max": max(packs.values(), default=0),
        "events": kinds,
        "tracebacks": tracebacks,
    }
    problems = []
    if missing:
        problems.append(f"{len(missing)} pushes not recorded, e.g. {missing[:3]}")
    if no_outcome:
        problems.append(f"{len(no_outcome)} runs without an outcome, e.g. {no_outcome[:3]}")
    if duplicated:
        problems.append(f"escalations duplicated: {duplicated}")
    if size > STATE_MAX:
        problems.append(f"state/ is {size / 1e6:.1f} MB, over its cap of 100MB")
    if max(packs.values(), default=0) > PACKS_BOUND:
        problems.append(f"packs over {PACKS_BOUND}: {packs}")
    if tracebacks:
        problems.append(f"{tracebacks} tracebacks in daemon.log")
    return figures, problems


def thirds(samples: list[Sample], seconds: float) -> tuple[list[Sample], list[Sample]]:
    life = max((s.life for s in samples), default=1)  # after the restart, if there was one
    middle = [s for s in samples if seconds / 3 <= s.at < 2 * seconds / 3 and s.life == life]
    last = [s for s in samples if s.at >= 2 * seconds / 3 and s.life == life]
    return middle, last


def hourly_growth(samples: list[Sample]) -> tuple[str, list[str]]:
    """--one-life: the RSS trend after the first hour, against 5 MB an hour (#41)."""
    later = [s for s in samples if s.at >= 3600]
    if len(later) < 2 or later[-1].at - later[0].at < 1800:
        return "RSS after the first hour: too short to tell (under 30 min of samples)", []
    slope = rss_slope(later)
    text = (
        f"RSS after the first hour {later[0].rss_kb / 1024:.1f} -> {later[-1].rss_kb / 1024:.1f}"
        f" MB over {(later[-1].at - later[0].at) / 3600:.1f} h: trend {slope:+.2f} MB/hour"
    )
    return text, [] if slope <= RSS_HOURLY_MB else [f"RSS grew {slope:+.2f} MB/hour after hour 1"]


def check_growth(soak: Soak, seconds: float) -> tuple[str, list[str]]:
    """RSS and descriptors: the last third against the middle third."""
    middle, last = thirds(soak.samples, seconds)
    if len(middle) < 2 or len(last) < 2:
        return "too few samples", [f"too few samples ({len(middle)}, {len(last)})"]
    rss_mid = statistics.median(s.rss_kb for s in middle) / 1024
    rss_last = statistics.median(s.rss_kb for s in last) / 1024
    fd_mid = statistics.median(s.fds for s in middle)
    fd_last = statistics.median(s.fds for s in last)
    th_mid = statistics.median(s.threads for s in middle)
    th_last = statistics.median(s.threads for s in last)
    life = max(s.life for s in soak.samples)
    slope = rss_slope([s for s in soak.samples if s.life == life and s.at >= seconds / 3])
    text = (
        f"RSS median {rss_mid:.1f} -> {rss_last:.1f} MB, descriptors {fd_mid:g} -> {fd_last:g}, "
        f"threads {th_mid:g} -> {th_last:g} (middle third -> last third)"
    )
    if seconds >= 600:  # over a shorter time the trend is noise
        text += f"; RSS trend over the last two thirds {slope:+.1f} MB/hour"
    problems = []
    if rss_last > rss_mid + RSS_SLACK_MB:
        problems.append(f"RSS grew: {rss_mid:.1f} -> {rss_last:.1f} MB")
    if fd_last > fd_mid + 8:
        problems.append(f"descriptors grew: {fd_mid:g} -> {fd_last:g}")
    return text, problems


def rss_slope(samples: list[Sample]) -> float:
    """The least-squares trend of RSS over `samples`, in MB per hour."""
    if len(samples) < 2:
        return 0.0
    xs = [s.at / 3600 for s in samples]
    ys = [s.rss_kb / 1024 for s in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0


def print_timeline(samples: list[Sample]) -> None:
    """Ten rows of the samples: when, which life, RSS, descriptors, threads."""
    step = max(1, len(samples) // 10)
    print("  t (s)  life   RSS (MB)  fds  threads")
    for s in [*samples[::step], samples[-1]] if samples else []:
        print(f"  {s.at:6.0f}  {s.life:4d}  {s.rss_kb / 1024:9.1f}  {s.fds:3d}  {s.threads:7d}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--loops", type=int, default=20)
    parser.add_argument("--push-every", type=float, default=15.0, help="seconds between pushes")
    parser.add_argument("--drain", type=float, default=600.0, help="seconds the runs may take")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument(
        "--tracemalloc", action="store_true", help="trace the daemon's allocations; top growth"
    )
    parser.add_argument(
        "--window", type=float, default=10.0, help="minutes between memory snapshots"
    )
    parser.add_argument("--smoke", action="store_true", help="5 loops, a push every 2 s, 60 s")
    parser.add_argument(
        "--one-life", action="store_true", help="no kill -9: one daemon life; RSS after hour 1"
    )
    parser.add_argument("--samples", type=Path, help="append each sample here as a JSON line")
    args = parser.parse_args()
    if args.smoke:
        args.minutes, args.loops, args.push_every, args.drain = 1.0, 5, 2.0, 300.0
        args.window = min(args.window, 0.25)
    seconds = args.minutes * 60
    tmp = Path(tempfile.mkdtemp(prefix="loopd-soak-"))
    daemon = None
    try:
        soak = make_soak_home(tmp, args.loops)
        if args.tracemalloc:
            soak.snapshots = tmp / "snapshots"
            soak.snapshots.mkdir()
        print(f"soak: {args.loops} loops, a push every {args.push_every:g} s for {seconds:.0f} s")
        daemon = drive(
            soak,
            seconds,
            args.push_every,
            1.0 if args.smoke else 5.0,
            args.window * 60,
            args.one_life,
            args.samples,
        )
        print(f"  pushes stopped; draining (up to {args.drain:.0f} s)", flush=True)
        deadline = time.monotonic() + args.drain
        while not drained(soak.home) and time.monotonic() < deadline:
            time.sleep(1.0)
        was_drained = drained(soak.home)
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(timeout=300)
        figures, problems = check_records(soak)
        growth, grew = check_growth(soak, seconds)
        if args.one_life:
            hourly, over = hourly_growth(soak.samples)
            growth, grew = f"{growth}; {hourly}", grew + over
        traced = ["tracemalloc: not asked for (--tracemalloc)"]
        if soak.snapshots is not None:
            # Under tracemalloc RSS holds its own bookkeeping, which grows with every
            # allocation traced: the traced memory is what tells growth then.
            traced, mb = traced_growth(soak.snapshots)
            grew = [g for g in grew if not g.startswith("RSS grew")]
            if not mb <= RSS_SLACK_MB:
                grew.append(f"traced memory grew {mb:+.2f} MB (or was not compared)")
        if args.smoke:  # a minute is too short to tell growth from noise: said, not failed
            print("".join(f"  note (smoke): {g}\n" for g in grew), end="")
        else:
            problems += grew
        if not was_drained:
            problems.append(f"runs still queued or live after {args.drain:.0f} s of draining")
        if code != 0:
            problems.append(f"loopd run exited {code} on SIGTERM")
        print_timeline(soak.samples)
        for key, value in figures.items():
            print(f"  {key}: {value}")
        print(f"  {growth}")
        print("\n".join(rss_windows(soak.samples, args.window * 60)))
        if soak.snapshots is not None:
            print("\n".join(traced + window_growth(soak.snapshots)))
        for note in soak.notes[:5]:
            print(f"  note: {note}")
        for problem in problems:
            print(f"  PROBLEM: {problem}")
        figure = (
            f"{args.minutes:g} min, {args.loops} loops: {figures['pushes']} pushes, "
            f"{figures['unrecorded']} unrecorded, {figures['runs']} runs, "
            f"state {figures['state bytes'] / 1e6:.1f} MB, packs max {figures['packs max']}; "
            f"{growth.split(' (')[0]}"
        )
        target = "all recorded, every run an outcome, no duplicate escalation, under cap, flat"
        code = verdict(figure, target, not problems, args.smoke)
        return 1 if problems else code  # a smoke run with a problem fails CI too
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
