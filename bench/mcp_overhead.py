"""A tool call's overhead beside the command it runs: record_evidence through `loopd mcp`.

Target: <= 50 ms at the 95th percentile. The real path of a call: the MCP Python SDK's client
(as an agent's CLI) talks stdio to a real `loopd mcp` process, which hands the call to a real
desk (daemon/runs/desk.py) over its unix socket with the token; the desk validates it and
runs the claim's command as a check (`daemon.runparts.checks.run_check`, /bin/sh -c, its own
process group). The overhead of a call is its round trip minus the command's own time as
the check measured it. loopd's commit of the work and the clean check tree are not in it:
bench/check_tree.py measures what those add to any set of checks.

Usage: python bench/mcp_overhead.py [--calls 200] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from verdict import verdict  # noqa: E402

from daemon.agents.deskwire import SOCKET_ENV, TOKEN_ENV  # noqa: E402
from daemon.runparts.checks import run_check  # noqa: E402
from daemon.runs.desk import Desk, RateLimit  # noqa: E402

TARGET_MS = 50.0
COMMAND = "true"


class Work:
    """record_evidence's command run as a check; its own time kept per call."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.seconds: list[float] = []

    def __call__(self, tool: str, args: Any) -> str:
        result = run_check(args.command, self.cwd, 60.0, {"PATH": os.defpath})
        self.seconds.append(result.seconds)
        return f"exit code {result.exit_code}"

    def refused(self, tool: str, why: str) -> None:
        raise SystemExit(f"the desk refused a call: {tool} {why}")


async def calls(desk: Desk, count: int) -> list[float]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "daemon.cli.main", "mcp"],
        env={"PATH": os.environ.get("PATH", ""), TOKEN_ENV: desk.token, SOCKET_ENV: str(desk.path)},
        cwd=str(Path(__file__).resolve().parent.parent),
    )
    times = []
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as client:
            await client.initialize()
            await client.list_tools()
            arguments = {"claim": "true exits 0", "command": COMMAND}
            for _ in range(count + 2):  # two warm-up calls, not counted
                started = time.perf_counter()
                result = await client.call_tool("record_evidence", arguments)
                times.append(time.perf_counter() - started)
                if result.isError:
                    raise SystemExit(f"the call failed: {result.content}")
    return times[2:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--smoke", action="store_true", help="a few seconds: 10 calls")
    args = parser.parse_args()
    count = 10 if args.smoke else args.calls
    with tempfile.TemporaryDirectory(prefix="loopd-mcp-bench-") as tmp:
        work = Work(Path(tmp))
        limit = RateLimit(per_minute=10**6, total=10**6, clock=time.monotonic)
        with Desk(Path(tmp), work, work.refused, limit=limit) as desk:
            rounds = asyncio.run(calls(desk, count))
    command = work.seconds[2:]
    overhead = sorted((r - c) * 1000 for r, c in zip(rounds, command, strict=True))
    p95 = overhead[max(0, int(len(overhead) * 0.95) - 1)]
    print(f"{len(overhead)} record_evidence calls of `{COMMAND}` through loopd mcp")
    print(f"command alone (as the check ran it): median {statistics.median(command) * 1000:.1f} ms")
    print(f"call round trip: median {statistics.median(rounds) * 1000:.1f} ms")
    print(f"overhead: median {statistics.median(overhead):.1f} ms, p95 {p95:.1f} ms")
    figure = f"p95 {p95:.1f} ms a call beside its command"
    return verdict(figure, f"<= {TARGET_MS:.0f} ms", p95 <= TARGET_MS, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
