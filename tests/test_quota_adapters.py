"""Each adapter's quota ending parks the run, and the run resumes its session after the reset.

The agent CLIs other than qwen cannot run here, so a stand-in program takes each one's name on
PATH: started as loopd starts that CLI, it prints the agent's recorded or documented quota
lines (tests/data/quota/) and exits 1; started again, it fixes the code and prints the agent's
recorded success stream (tests/data/streams/). The run itself is real: the executor, the
adapter's invocation and parsing, the supervisor, git, the checks; the clock is injected.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import threading
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from daemon.home import Home
from daemon.runparts.services import RunServices
from daemon.runs import parking
from daemon.runs.executor import RunExecutor, new_run
from daemon.runs.slots import RunSlots
from daemon.scheduling.queue import PendingRun
from daemon.state.records import Trigger
from tests.helpers import make_home, make_repo, talk, wait_for

DATA = Path(__file__).parent / "data"
NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5\n",
}
CLAUDE_RESET = NOW + timedelta(hours=3)

# adapter: (quota lines, success lines, the reset they name, what the resumed argv holds)
CASES: dict[str, tuple[str, str, datetime | None, list[str]]] = {
    "qwen": (
        "quota/qwen-quota.real.jsonl",
        "streams/qwen.jsonl",
        datetime(2026, 12, 1, 9, tzinfo=UTC),
        ["--resume", "e424e4d4-ad99-4cf9-8bee-8fca44942535"],
    ),
    "claude": (
        "quota/claude-quota.jsonl",
        "streams/claude.jsonl",
        CLAUDE_RESET,
        ["--resume", "quota-session"],
    ),
    "codex": (
        "quota/codex-quota.jsonl",
        "streams/codex.jsonl",
        datetime(2026, 11, 30, 12, 16, tzinfo=UTC),
        ["resume", "0199a213-81c0-7800-8aa1-bbab2a035a53"],
    ),
    "gemini": (  # recorded from Gemini CLI 0.61.0: a 429 whose RetryInfo says 3600s
        "quota/gemini-quota.real.jsonl",
        "streams/gemini.jsonl",
        NOW + timedelta(seconds=3600),
        ["--resume", "2e4f19f4-b1c6-42d5-b735-6a69860b8be7"],
    ),
    "opencode": (
        "quota/opencode-quota.jsonl",
        "streams/opencode.jsonl",
        NOW + timedelta(hours=1),
        ["--session", "ses_494719016ffe85dkDMj0FPRbHK"],
    ),
    "aider": ("quota/aider-quota.txt", "streams/aider.txt", None, ["--restore-chat-history"]),
}


def lines_of(name: str) -> str:
    text = (DATA / name).read_text()
    kept = [line for line in text.splitlines() if line != "this is not json {"]
    if name.endswith("claude-quota.jsonl"):
        # The documented event names a reset years away; this one lifts in three hours.
        kept = [line.replace("2000000000", str(int(CLAUDE_RESET.timestamp()))) for line in kept]
    return "\n".join(kept) + "\n"


def stand_in(bin_dir: Path, adapter: str, calls: Path) -> None:
    """A program named like the adapter's CLI: the quota ending first, then the success."""
    quota, success, _, _ = CASES[adapter]
    program = bin_dir / adapter
    program.write_text(
        f"#!{sys.executable}\n"
        "import json, pathlib, sys\n"
        f"calls = pathlib.Path({str(calls)!r})\n"
        "before = calls.read_text().splitlines() if calls.exists() else []\n"
        "calls.write_text('\\n'.join(before + [json.dumps(sys.argv)]) + '\\n')\n"
        "if not before:\n"
        f"    sys.stdout.write({lines_of(quota)!r}); sys.stdout.flush(); sys.exit(1)\n"
        "p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
        f"sys.stdout.write({lines_of(success)!r})\n"
    )
    program.chmod(0o755)


@pytest.mark.parametrize("adapter", sorted(CASES))
def test_each_adapters_quota_ending_parks_the_run_and_the_session_resumes(
    tmp_path: Path, adapter: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, reset, resumed_with = CASES[adapter]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # The stand-in records its argv outside its tree: a folder the sandbox lets it write.
    shared, sandbox = talk(tmp_path)
    calls = shared / "calls"
    stand_in(bin_dir, adapter, calls)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(parking, "POLL", 0.05)
    repo = make_repo(tmp_path / "repo", BUGGY)
    config = (
        f'[agents.p]\nadapter = "{adapter}"\nenv = {{ TZ = "UTC" }}\n'
        f'[limits]\nmax_wait = "2d"\nworktrees = "{tmp_path / "worktrees"}"\n{sandbox}'
    )
    loop = {
        "repo": str(repo),
        "task": "Make check.py pass.",
        "agent": "p",
        "done_when": ["python3 check.py"],
        "max_nudges": 0,
        "max_attempts": 1,
        "timezone": "UTC",
        "critic": "off",
    }
    text = "".join(f"{k} = {json.dumps(v)}\n" for k, v in loop.items())
    home = Home(make_home(tmp_path / "home", config, {"calc": text}))
    loaded = home.load()
    clock = [NOW]
    services = RunServices(
        home=home, config=loaded.daemon, store=home.state(), clock=lambda: clock[0]
    )
    services.slots = RunSlots(lambda: 1)
    trigger = Trigger(loop="calc", kind="manual", reason="test", ts=NOW)
    run_id = services.store.new_run_id("calc", NOW)
    pending = PendingRun(id=run_id, loop="calc", trigger=trigger, queued_at=NOW)
    run = new_run(services, loaded.loops["calc"], pending)
    services.slots.add(run.id)
    executor = RunExecutor(services, loaded.loops["calc"], run)
    thread = threading.Thread(target=executor.execute, daemon=True)
    thread.start()
    path = services.store.run_dir(run.id) / "run.toml"

    def parked() -> dict[str, Any] | None:
        record = tomllib.loads(path.read_text())
        return record if record.get("phase") == "waiting" else None

    record = wait_for(parked, timeout=60, what=f"{adapter} to park")
    expected = reset + parking.RESET_MARGIN if reset else NOW + parking.FIRST_WAIT
    assert record["resume_at"] == expected
    assert record["park"]["reset_named"] is (reset is not None)
    assert services.slots.holders() == set()  # given back before the run reads as waiting
    clock[0] = expected
    thread.join(timeout=120)
    assert not thread.is_alive()
    record = tomllib.loads(path.read_text())
    assert record["outcome"] == "succeeded", record.get("reason")
    (attempt,) = record["attempts"]
    assert attempt["nudges"] == 0 and attempt["checks_passed"] is True
    first, second = (json.loads(line) for line in calls.read_text().splitlines())
    joined = shlex.join(second)
    assert shlex.join(resumed_with) in joined, joined
    assert "Make check.py pass." in joined  # what the agent had been asked, sent again
