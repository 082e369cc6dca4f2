"""Bench: a command agent prints a flood; print the supervising process's peak RSS and the
transcript's size.

    python bench/agent_output.py [--mb 200] [--cap 50MB] [--line-bytes 1024] [--long-line-mb 0]

Target: an agent printing 200 MB keeps the daemon's RSS <= 150 MB, the
transcript capped and marked. The RSS figure is this process's own (the supervisor side,
resource.getrusage RUSAGE_SELF), not the agent's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from verdict import verdict

from daemon.agents.base import Invocation
from daemon.agents.command import CommandAdapter
from daemon.agents.supervisor import Supervisor
from daemon.agents.transcript import Transcript
from daemon.config import AgentProfile
from daemon.units import parse_size

AGENT = """
import sys
total, line_bytes, long_line = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
out = sys.stdout.buffer
line = b"x" * (line_bytes - 1) + b"\\n"
block = line * max(1, (1 << 20) // line_bytes)
written = 0
while written + len(block) <= total:
    out.write(block)
    written += len(block)
out.write(line[: max(0, total - written - 1)] + b"\\n")
if long_line:
    chunk = b"z" * (1 << 20)
    for _ in range(long_line):
        out.write(chunk)
    out.write(b"\\n")
out.flush()
"""


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="megabytes the agent prints")
    parser.add_argument("--cap", default="50MB", help="the transcript cap")
    parser.add_argument("--line-bytes", type=int, default=1024, help="length of each line")
    parser.add_argument("--long-line-mb", type=int, default=0, help="then one line this long")
    parser.add_argument("--smoke", action="store_true", help="4 MB, a 1 MB cap: that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.mb, args.cap = 4, "1MB"

    cap = parse_size(args.cap)
    with tempfile.TemporaryDirectory(prefix="loopd-bench-") as tmp:
        root = Path(tmp)
        (root / "tree").mkdir()
        transcript = Transcript(root / "transcript.jsonl", cap_bytes=cap)
        adapter = CommandAdapter(AgentProfile(adapter="command", command=["agent"]))
        supervisor = Supervisor(adapter, transcript, root / "tree", {"PATH": os.environ["PATH"]})
        argv = [
            sys.executable,
            "-c",
            AGENT,
            str(args.mb << 20),
            str(args.line_bytes),
            str(args.long_line_mb),
        ]
        rss_before = peak_rss_mb()
        started = time.perf_counter()
        result = supervisor.run(Invocation(argv=argv), timeout=3600, stall_after=600)
        elapsed = time.perf_counter() - started
        transcript.close()
        size = (root / "transcript.jsonl").stat().st_size
        with open(root / "transcript.jsonl", "rb") as fh:
            fh.seek(max(0, size - 4096))
            last = json.loads(fh.read().splitlines()[-1])
    print(
        f"agent output        {result.output_bytes / 2**20:.1f} MB in {elapsed:.1f} s "
        f"({result.output_bytes / 2**20 / max(elapsed, 1e-9):.1f} MB/s), exit {result.exit_code}"
    )
    print(
        f"peak RSS (loopd)    {peak_rss_mb():.1f} MB (before the run: {rss_before:.1f} MB)"
        f"  target <= 150 MB"
    )
    print(
        f"transcript          {size / 2**20:.2f} MB, cap {cap / 2**20:.2f} MB, "
        f"last line type {last.get('type')!r}, "
        f"dropped {last.get('dropped_bytes', 0) / 2**20:.1f} MB"
    )
    ok = peak_rss_mb() <= 150 and size <= cap and last.get("type") == "truncated"
    print("OK" if ok else "OVER TARGET")
    figure = f"peak RSS {peak_rss_mb():.0f} MB while an agent prints {args.mb} MB"
    return verdict(figure, "<= 150 MB, transcript capped", ok, args.smoke)


if __name__ == "__main__":
    raise SystemExit(main())
