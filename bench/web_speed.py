"""The console's pages (`loopd web`) over a home of 10,000 runs: first byte and whole page.

Target (issue 37): each page's first byte <= 100 ms and the whole page <= 200 ms, medians,
the server warm. The home is bench/status_speed.py's (its loops on real git repositories,
N runs written through `StateStore.save_run`); one run gets a diff of 400 lines for its page.
`loopd web` runs as a real process on 127.0.0.1; after logging in, each page is fetched
twice to warm it, then R times over one keep-alive connection: the first byte is timed when
the status line and headers have arrived (`getresponse()`), the whole page when the body has
been read. The server's CPU time over the timed requests is printed beside.
Usage: python bench/web_speed.py [--runs 10000] [--repeat 15] [--keep] [--home H] [--smoke]
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from status_speed import build_home, child_env, loopd_argv  # noqa: E402
from verdict import verdict  # noqa: E402

from daemon.people.report_nights import night_of  # noqa: E402
from tests.helpers import wait_for  # noqa: E402

FIRST_BYTE_MS, WHOLE_MS = 100.0, 200.0
DIFF_LINES = 400


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def newest_run(home: Path) -> str:
    return sorted(p.name for p in (home / "state" / "runs").iterdir())[-1]


def write_diff(home: Path, run_id: str) -> None:
    """A diff of DIFF_LINES lines for `run_id`'s first attempt, as loopd writes diff.patch."""
    lines = ["diff --git a/app.py b/app.py", "--- a/app.py", "+++ b/app.py"]
    for hunk in range(DIFF_LINES // 10):
        lines.append(f"@@ -{hunk * 10 + 1},8 +{hunk * 10 + 1},8 @@ def handler_{hunk}():")
        lines += [
            f"     context = {hunk}",
            f"-    old = parse({hunk})",
            f"+    new = parse({hunk}, tz)",
        ]
        lines += ["     return new"] * 6
    patch = home / "state" / "runs" / run_id / "attempt-1" / "diff.patch"
    patch.parent.mkdir(parents=True, exist_ok=True)
    patch.write_text("\n".join(lines) + "\n")


class Console:
    """A running `loopd web` and one keep-alive connection to it, logged in."""

    def __init__(self, home: Path) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [*loopd_argv(), "--home", str(home), "web", "--bind", f"127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env=child_env(),
        )
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        wait_for(self._up, timeout=60, what="loopd web listening")
        token = (home / "state" / "web-token").read_text().strip()
        self.conn.request("GET", f"/login?token={token}")
        response = self.conn.getresponse()
        response.read()
        self.cookie = response.getheader("set-cookie", "").split(";")[0]

    def _up(self) -> bool:
        try:
            probe = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            probe.request("GET", "/static/console.css")
            return probe.getresponse().status == 200
        except OSError:
            return False

    def fetch(self, path: str) -> tuple[float, float, int, int]:
        """(first byte ms, whole page ms, status, bytes) of one GET."""
        began = time.perf_counter()
        self.conn.request("GET", path, headers={"Cookie": self.cookie})
        response = self.conn.getresponse()
        first = time.perf_counter()
        body = response.read()
        whole = time.perf_counter()
        return (first - began) * 1000, (whole - began) * 1000, response.status, len(body)

    def cpu(self) -> float:
        """The server's CPU seconds so far (user + system, from /proc)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / 100  # utime, stime in clock ticks

    def stop(self) -> None:
        self.conn.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)


def pages(home: Path, run_id: str) -> list[str]:
    # The night of the newest run (noon to noon in the machine's zone: the home sets none).
    night = night_of(datetime.strptime(run_id[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC), None)
    return [
        "/",
        "/runs",
        "/runs?loop=api&outcome=succeeded",
        f"/runs?night={night}",
        f"/runs/{run_id}",
        "/escalations",
        "/rules",
        "/report",
        "/api/status",
        "/api/runs",
        f"/api/runs/{run_id}",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--home", type=Path, help="a home made before (by --keep), not rebuilt")
    parser.add_argument("--smoke", action="store_true", help="100 runs, 2 requests: that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.repeat = 100, 2

    tmp = Path(tempfile.mkdtemp(prefix="loopd-bench-web-"))
    console = None
    try:
        home = args.home or build_home(tmp, args.runs)
        run_id = newest_run(home)
        write_diff(home, run_id)
        console = Console(home)
        print(f"loopd web on 127.0.0.1:{console.port}, {args.repeat} requests per page, warm")
        print(f"  load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} core(s)")
        print(f"  {'page':<40} {'first byte':>11} {'whole':>9} {'bytes':>9} {'CPU/req':>9}")
        worst_first = worst_whole = worst_cpu = 0.0
        slowest = ""
        for path in pages(home, run_id):
            for _ in range(2):
                _, _, status, _ = console.fetch(path)
                assert status == 200, f"{path}: {status}"
            cpu_before = console.cpu()
            timings = [console.fetch(path) for _ in range(args.repeat)]
            cpu_each = (console.cpu() - cpu_before) / args.repeat * 1000
            first = statistics.median(t[0] for t in timings)
            whole = statistics.median(t[1] for t in timings)
            size = timings[-1][3]
            print(
                f"  {path[:40]:<40} {first:>8.1f} ms {whole:>6.1f} ms {size:>9,} "
                f"{cpu_each:>6.1f} ms"
            )
            if whole > worst_whole:
                slowest = path
            worst_cpu = max(worst_cpu, cpu_each)
            worst_first, worst_whole = max(worst_first, first), max(worst_whole, whole)
        load = os.getloadavg()[0]
        print(f"  load average after: {load:.1f}")
        met = worst_first <= FIRST_BYTE_MS and worst_whole <= WHOLE_MS
        figure = (
            f"{args.runs} runs: slowest page {slowest} first byte {worst_first:.0f} ms, whole "
            f"{worst_whole:.0f} ms (medians; server CPU at most {worst_cpu:.0f} ms a request; "
            f"load {load:.1f})"
        )
        target = f"first byte <= {FIRST_BYTE_MS:.0f} ms, whole <= {WHOLE_MS:.0f} ms, each page"
        return verdict(figure, target, met, args.smoke)
    finally:
        if console is not None:
            console.stop()
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
