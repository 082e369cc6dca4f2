"""`loopd once` on a run that parks says so at once: the `parked:` line with the reset time
and how to stop waiting, while it waits in the foreground (not only when the wait is stopped).

Real parts: `loopd once` as a subprocess, a `command` agent printing an HTTP 429 with a
Retry-After of an hour, bubblewrap, SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tests.helpers import make_home, make_repo, runs, talk, wait_for
from tests.sandboxing import require_bwrap


def test_loopd_once_prints_its_parked_line_as_the_run_parks(tmp_path: Path) -> None:
    require_bwrap()
    _, sandbox = talk(tmp_path)
    agent = [
        sys.executable,
        "-c",
        "print('HTTP 429 Too Many Requests'); print('Retry-After: 3600'); raise SystemExit(1)",
    ]
    repo = make_repo(
        tmp_path / "repo",
        {"check.py": "raise SystemExit(1)\n"},
    )
    config = f'[agents.a]\nadapter = "command"\ncommand = {json.dumps(agent)}\n' + sandbox
    loop = (
        f'repo = "{repo}"\ntask = "Make check.py pass."\nagent = "a"\n'
        'done_when = ["python3 check.py"]\nmax_attempts = 1\nmax_nudges = 0\n'
    )
    home = make_home(tmp_path / "home", config, {"calc": loop})
    env = {k: v for k, v in os.environ.items() if k != "LOOPD_HOME"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli.main", "--home", str(home), "once", "calc"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    try:
        parked = wait_for(
            lambda: next((line for line in lines if line.startswith("parked:")), None),
            timeout=120,
            what="the parked line while `loopd once` still waits",
        )
        assert proc.poll() is None  # still waiting in the foreground
        (run,) = runs(home)
        assert run["phase"] == "waiting"
        assert f"parked: {run['id']} waits for a usage limit until " in parked
        assert "Ctrl-C stops waiting and leaves the run parked" in parked
        assert "the next `loopd once calc` resumes it" in parked
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 1
        reader.join(timeout=10)
    assert [line for line in lines if line.startswith("parked:")] == [parked]  # told once
