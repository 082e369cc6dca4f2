"""Record the Temporal workflow histories again: `python -m tests.record_histories [SET] [-k EXPR]`.

Runs the parity scenarios (tests/test_parity.py, a real dev server) with
LOOPD_RECORD_HISTORIES=1; each scenario's histories go to `tests/data/histories/SET/` (SET:
today's date unless given). Older sets stay: tests/test_workflow_replay.py replays them all.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.histories import ROOT


def main(argv: list[str]) -> int:
    env = {**os.environ, "LOOPD_RECORD_HISTORIES": "1"}
    if argv and not argv[0].startswith("-"):
        env["LOOPD_HISTORIES_SET"], argv = argv[0], argv[1:]
    command = [sys.executable, "-m", "pytest", "-q", "tests/test_parity.py", *argv]
    return subprocess.run(command, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
