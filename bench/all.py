"""Every bench in bench/, one after the other: their figures against their targets in one table.

`python bench/all.py` runs each at full size (this can take an hour; the benches time things,
so they never run side by side) and writes the table to bench/results.md, for the performance
page (docs/performance.md). `python bench/all.py --smoke` runs each bench's --smoke mode (tiny
sizes, seconds each): it only checks that every bench completes and prints its figure, and
exits 1 when one does not (CI runs it); `--jobs N` runs N smoke benches at once (their
figures mean nothing at smoke size, so they may share the machine). `--only NAME` runs the
named benches only.
Usage: python bench/all.py [--smoke [--jobs N]] [--only NAME ...] [--table PATH]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from verdict import read_verdict

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
NOT_BENCHES = {"all", "verdict"}
SMOKE_TIMEOUT = 600.0  # seconds a smoke run may take before it counts as failed
FULL_TIMEOUT = 4 * 3600.0
# The longest smoke benches (about a minute or two each), started first with --jobs: the
# others then fill the remaining slots, and the last to end is not a long one started late.
LONG_SMOKES = ("soak", "engine_throughput", "landing_queue", "mutation", "web_live")


@dataclass
class Outcome:
    """What one bench did: its exit code, its result line (None: it printed none), its time."""

    name: str
    code: int
    result: dict[str, object] | None
    seconds: float
    tail: str

    @property
    def completed(self) -> bool:
        """It ran to its end and printed its figure (a missed target still completes)."""
        smoke = bool(self.result and self.result.get("smoke"))
        return self.result is not None and (self.code == 0 or not smoke)


def benches() -> list[str]:
    """The bench scripts' names, in order."""
    return sorted(p.stem for p in BENCH.glob("*.py") if p.stem not in NOT_BENCHES)


def run_one(name: str, smoke: bool) -> Outcome:
    """Run one bench as its own process, from the repository's root and on its code."""
    env = dict(os.environ)
    # This checkout's daemon/ and tests/, whatever loopd the interpreter has installed.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    argv = [sys.executable, str(BENCH / f"{name}.py"), *(["--smoke"] if smoke else [])]
    started = time.monotonic()
    try:
        proc = subprocess.run(
            argv,
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=SMOKE_TIMEOUT if smoke else FULL_TIMEOUT,
        )
        code, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or b""
        text = out.decode(errors="replace") if isinstance(out, bytes) else out
        code, output = -1, text + f"\n(timed out after {exc.timeout:.0f} s)"
    seconds = time.monotonic() - started
    tail = "\n".join(output.strip().splitlines()[-15:])
    return Outcome(name, code, read_verdict(output), seconds, tail)


def table(outcomes: list[Outcome]) -> str:
    """The results as a Markdown table: bench, figure, target, met."""
    rows = ["| bench | figure | target | met |", "|---|---|---|---|"]
    for o in outcomes:
        if o.result is None:
            rows.append(f"| `{o.name}` | did not complete (exit {o.code}) | | no |")
            continue
        met = "yes" if o.result.get("met") else "no"
        rows.append(f"| `{o.name}` | {o.result['figure']} | {o.result['target']} | {met} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="each bench's smoke mode")
    parser.add_argument("--only", nargs="*", default=[], help="these benches only")
    parser.add_argument(
        "--jobs", type=int, default=1, help="smoke benches run at once (--smoke only)"
    )
    parser.add_argument(
        "--table", default=str(BENCH / "results.md"), help="where a full run writes its table"
    )
    args = parser.parse_args(argv)
    names = benches()
    unknown = sorted(set(args.only) - set(names))
    if unknown:
        parser.error(f"no such bench: {', '.join(unknown)} (there are: {', '.join(names)})")
    if args.jobs < 1 or (args.jobs > 1 and not args.smoke):
        parser.error("--jobs N: N >= 1, and more than 1 only with --smoke (full benches time)")
    chosen = [n for n in names if not args.only or n in args.only]
    outcomes = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        # Each line printed when its bench ends; the table keeps the benches' order.
        first = [n for n in LONG_SMOKES if n in chosen] if args.jobs > 1 else []
        order = first + [n for n in chosen if n not in first]
        running = {pool.submit(run_one, name, args.smoke): name for name in order}
        for future in as_completed(running):
            outcome = future.result()
            outcomes.append(outcome)
            word = "completed" if outcome.completed else f"FAILED (exit {outcome.code})"
            print(f"{outcome.name} ... {word} in {outcome.seconds:.0f} s", flush=True)
            if not outcome.completed:
                print("  " + outcome.tail.replace("\n", "\n  "), flush=True)
    outcomes.sort(key=lambda o: chosen.index(o.name))
    text = table(outcomes)
    print()
    print(text, end="")
    if not args.smoke:
        Path(args.table).write_text(text)
        print(f"written to {args.table}")
    failed = [o.name for o in outcomes if not o.completed]
    if failed:
        print(f"did not complete: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
