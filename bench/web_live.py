"""The console's live log (`loopd web`, /runs/RUN/live): an agent's line to the page, and what
20 open live pages cost.

Targets (issue 37): an agent's line reaches the page within 500 ms (p95); 20 open live pages
add no more than 5% of a core to the console. A real `loopd once` runs a `command` agent (in
the default sandbox) that prints a line every 0.25 s with the time it printed it; `loopd web`
runs as a real process on 127.0.0.1. One live stream is read for a while: each line's delay
is the time it arrived less the time the agent printed it (the whole way: the agent's pipe,
loopd's transcript, `loopd logs -f` in the console, the server-sent event). Then the
console's CPU over a window with the run going and no page open, and over the same window
with 20 live streams open and read.
Usage: python bench/web_live.py [--window 15] [--pages 20] [--keep] [--smoke]
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from status_speed import child_env, loopd_argv  # noqa: E402
from trigger_latency import percentile  # noqa: E402
from verdict import verdict  # noqa: E402
from web_speed import Console  # noqa: E402

from tests.helpers import make_home, make_repo, wait_for  # noqa: E402

P95_MS, CPU_SHARE = 500.0, 5.0
INTERVAL = 0.25  # seconds between the agent's lines
TICK = re.compile(r"tick (\d+) (\d+\.\d+)")
AGENT = (
    "import time\n"
    "end = time.time() + {seconds}\n"
    "n = 0\n"
    "while time.time() < end:\n"
    "    n += 1\n"
    "    print(f'tick {{n}} {{time.time():.6f}}', flush=True)\n"
    "    time.sleep({interval})\n"
    "open('ticked.txt', 'w').write('done')\n"
)


def home_with_agent(tmp: Path, seconds: float) -> Path:
    """A home whose one loop runs an agent printing a timed line every INTERVAL seconds."""
    repo = make_repo(tmp / "repo", {"app.py": "print('hi')\n"})
    script = AGENT.format(seconds=seconds, interval=INTERVAL)
    config = (
        '[agents.ticker]\nadapter = "command"\n'
        f"command = {json.dumps([sys.executable, '-c', script])}\n"
        f'[limits]\nworktrees = "{tmp / "wt"}"\n'
    )
    loop = (
        f'repo = "{repo}"\ntask = "Print the time."\nagent = "ticker"\n'
        'done_when = ["test -f ticked.txt"]\n'
        f'critic = "off"\nmax_attempts = 1\nattempt_timeout = "{int(seconds) + 120}s"\n'
        f'stall_after = "{int(seconds) + 60}s"\n'
    )
    return make_home(tmp / "home", config, {"live": loop})


class Stream:
    """One live page: an open /runs/RUN/live stream read on a thread of its own."""

    def __init__(self, console: Console, run_id: str) -> None:
        self.delays: list[float] = []  # ms from the agent's print to this stream
        self.conn = http.client.HTTPConnection("127.0.0.1", console.port, timeout=120)
        self.conn.request("GET", f"/runs/{run_id}/live", headers={"Cookie": console.cookie})
        self.response = self.conn.getresponse()
        assert self.response.status == 200, self.response.status
        self.recording = False
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for raw in self.response:
                line = raw.decode("utf-8", "replace")
                found = TICK.search(line) if line.startswith("data:") else None
                if found and self.recording:
                    self.delays.append((time.time() - float(found.group(2))) * 1000)
                if line.startswith("event: end"):
                    return
        except (OSError, ValueError, AttributeError):
            return  # closed under the read (http.client's file is gone then)

    def close(self) -> None:
        self.conn.close()


def cpu_over(console: Console, seconds: float) -> float:
    """The console's CPU over `seconds`, as a percentage of one core."""
    before, began = console.cpu(), time.monotonic()
    time.sleep(seconds)
    return (console.cpu() - before) / (time.monotonic() - began) * 100


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=15.0, help="seconds of each measure")
    parser.add_argument("--pages", type=int, default=20, help="live pages open at once")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--smoke", action="store_true", help="3 s windows, 3 pages")
    args = parser.parse_args()
    if args.smoke:
        args.window, args.pages = 3.0, 3

    tmp = Path(tempfile.mkdtemp(prefix="loopd-bench-live-"))
    seconds = args.window * 4 + 60  # the agent outlives the three measures and the starts
    home = home_with_agent(tmp, seconds)
    once = subprocess.Popen(
        [*loopd_argv(), "--home", str(home), "once", "live"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=child_env(),
        text=True,
    )
    console: Console | None = None
    streams: list[Stream] = []
    try:
        assert once.stdout is not None
        run_id = once.stdout.readline().strip()
        transcript = home / "state" / "runs" / run_id / "attempt-1" / "transcript.jsonl"
        wait_for(transcript.exists, timeout=120, what="the agent's first line")
        console = Console(home)
        print(f"loopd web on 127.0.0.1:{console.port}, run {run_id}, a line every {INTERVAL}s")
        idle = cpu_over(console, args.window)
        print(f"  console CPU, the run going, no page open: {idle:.1f}% of a core")

        one = Stream(console, run_id)
        streams.append(one)
        time.sleep(1.0)  # past the transcript's lines so far, sent at once
        one.recording = True
        time.sleep(args.window)
        one.recording = False
        delays = list(one.delays)
        assert delays, "no line reached the live stream"
        p50, p95 = percentile(delays, 50), percentile(delays, 95)
        print(
            f"  agent's line to the stream: {len(delays)} lines, p50 {p50:.0f} ms, p95 {p95:.0f} ms"
        )

        streams += [Stream(console, run_id) for _ in range(args.pages - 1)]
        time.sleep(1.0)
        busy = cpu_over(console, args.window)
        added = busy - idle
        print(f"  console CPU with {args.pages} live pages open: {busy:.1f}% (+{added:.1f}%)")
        met = p95 <= P95_MS and added <= CPU_SHARE
        figure = f"line to page p95 {p95:.0f} ms; {args.pages} live pages add {added:.1f}% CPU"
        target = f"p95 <= {P95_MS:.0f} ms; {args.pages} pages add <= {CPU_SHARE:.0f}% of a core"
        return verdict(figure, target, met, args.smoke)
    finally:
        for stream in streams:
            stream.close()
        if console is not None:
            console.stop()
        once.terminate()  # loopd once ends its run as cancelled on SIGTERM
        try:
            once.wait(timeout=60)
        except subprocess.TimeoutExpired:
            once.kill()
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
