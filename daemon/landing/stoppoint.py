"""A test's stop point in a landing: with `LOOPD_TEST_LANDING_STOP=STEP:FOLDER` in its
environment, the process finishing a run writes `FOLDER/at-STEP-RUN_ID` when its landing
reaches STEP, and waits there until `FOLDER/go-STEP` exists (or the test kills it: the
landing queue's kill -9 tests stop a real loopd at each step this way).

STEP is one of the queue's steps as written (`queued`, `landing`, `moving`: before the target
moves) or `moved` (the target moved, the landing not recorded yet). Unset, it costs a
lookup in the environment.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

STOP_ENV = "LOOPD_TEST_LANDING_STOP"
POLL = 0.05


def stop_point(step: str, run_id: str) -> None:
    """Stop at `step` when the environment asks for it (tests only)."""
    want, _, folder = os.environ.get(STOP_ENV, "").partition(":")
    if want != step or not folder:
        return
    (Path(folder) / f"at-{step}-{run_id}").write_text(str(os.getpid()))
    while not (Path(folder) / f"go-{step}").exists():
        time.sleep(POLL)
