"""`loopd calibrate` over 60 shipped cases with the scripted endpoint: the judge's own time.

Target: <= 10 s on a 2-core machine for 60 cases (120 judge calls: each case in two orders
of the evidence). `loopd calibrate --json` runs as a real process against the scripted
OpenAI-compatible server of the tests (answering at once), so the figure is loopd's part:
loading the cases, building the evidence twice, the HTTP calls, the figures, the state file.
Usage: python bench/calibration.py [--cases N] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from verdict import verdict  # noqa: E402

from tests.helpers import loopd, make_home  # noqa: E402
from tests.model_server import ScriptedModelServer  # noqa: E402

TARGET_SECONDS = 10.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=60, help="how many shipped cases")
    parser.add_argument("--smoke", action="store_true", help="7 cases: only that it completes")
    args = parser.parse_args()
    cases = 7 if args.smoke else args.cases
    reply = {"score": 8, "verdict": "bench", "unsupported_claims": [], "feedback": ""}
    with tempfile.TemporaryDirectory() as tmp, ScriptedModelServer(default={"json": reply}) as srv:
        config = f'[verifier]\nbase_url = "{srv.base_url}"\nmodel = "bench-judge"\n'
        home = make_home(Path(tmp) / "home", config)
        started, cpu = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
        done = loopd(home, "calibrate", "--json", "--limit", str(cases), timeout=600)
        seconds = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        # The CPU loopd used: on a busy machine the wall time is mostly waiting for a core.
        cpu_seconds = after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1
        [figures] = json.loads(done.stdout)["models"]
        calls = sum(1 for r in srv.requests if r["path"].endswith("/chat/completions"))
    print(
        f"{figures['cases']} cases, {calls} judge calls in {seconds:.2f} s "
        f"({cpu_seconds:.2f} s of CPU; mean call {figures['latency_ms_mean']:.0f} ms); "
        f"false-pass rate {figures['false_pass_rate']:.2f} (a judge that passes everything)"
    )
    figure = f"{seconds:.1f} s for {figures['cases']} cases"
    met = seconds <= TARGET_SECONDS * cases / 60
    return verdict(figure, f"<= {TARGET_SECONDS:.0f} s for 60 cases", met, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
