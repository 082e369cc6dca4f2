"""The real Qwen Code CLI hits a usage limit: the run parks, and after a restart of the daemon
it resumes the same qwen session with the task sent again.

The scripted OpenAI-compatible server answers the agent's requests with HTTP 429 and an
`insufficient_quota` body naming the reset ("Your quota will reset at ..."), which Qwen Code
0.24.4 turns into its "Quota exhausted" result after a few requests. The test then lets the
server answer normally, moves the park's resume_at into the past (no sleeping until a reset),
and starts the daemon again.
"""

from __future__ import annotations

import os
import shlex
import sys
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from tests.helpers import (
    daemon_log,
    events,
    git,
    loopd,
    make_home,
    make_repo,
    runs,
    start_daemon,
    stop_daemon,
    transcript_text,
    wait_for,
)
from tests.model_server import ScriptedModelServer, Spec
from tests.test_e2e_qwen import (
    BUGGY,
    CHECK,
    FIXED,
    QUIET,
    QWEN,
    QWEN_PACKAGE,
    TASK,
    Turn,
    read_calc,
    write_fix,
)

if QWEN is None:
    why = f"the real qwen CLI is needed: `npm install --no-save {QWEN_PACKAGE}` (as .ci/run does)"
    if os.environ.get("CI") == "true":
        pytest.fail(why, pytrace=False)
    pytest.skip(why, allow_module_level=True)


def test_qwen_on_its_quota_parks_and_resumes_the_same_session_after_a_restart(
    tmp_path: Path, model_server: ScriptedModelServer, daemons: list
) -> None:
    reset = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=0)
    quota = {"on": True}
    body = {
        "error": {
            "message": "Quota exceeded for this API key. Your quota will reset at "
            f"{reset.strftime('%Y-%m-%dT%H:%M:%SZ')}.",
            "type": "insufficient_quota",
            "code": "insufficient_quota",
        }
    }

    def reply(request: dict[str, Any]) -> Spec:
        turn = Turn(request)
        if quota["on"]:
            return {"status": 429, "body": body, "headers": {"Retry-After": "0"}}
        if not turn.is_agent:
            return QUIET
        if turn.answered == "call_fix_1":
            return "Fixed add() in calc.py: it returns a + b now."
        if turn.answered == "call_read_1":
            return write_fix(turn, "call_fix_1")
        return read_calc(turn, "call_read_1")

    model_server.script(reply)
    repo = make_repo(tmp_path / "repo", {"calc.py": BUGGY, "check.py": CHECK})
    profile = {"adapter": "qwen", "model": "qwen3-coder-test", "base_url": model_server.base_url}
    loop = {
        "repo": str(repo),
        "task": TASK,
        "agent": "qwen",
        "done_when": [f"{shlex.quote(sys.executable)} check.py"],
        "protect": ["check.py"],
        "max_attempts": 1,
        "attempt_timeout": "120s",
        "stall_after": "90s",
        "max_nudges": 1,
        "timezone": "UTC",
    }
    home = make_home(
        tmp_path / "home",
        tomli_w.dumps({"agents": {"qwen": profile}}),
        {"fix": tomli_w.dumps(loop)},
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    assert QWEN is not None
    (bin_dir / "qwen").symlink_to(QWEN.resolve())
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}

    daemon = start_daemon(home, env=env)
    daemons.append(daemon)
    assert loopd(home, "trigger", "fix").returncode == 0
    record = wait_for(
        lambda: next((r for r in runs(home) if r.get("phase") == "waiting"), None),
        timeout=120,
        what="qwen's quota to park the run",
    )
    park = record["park"]
    assert "Quota exhausted" in park["message"] and park["session_id"]
    assert record["resume_at"] == reset + timedelta(minutes=1)
    assert record["attempts"][0]["nudges"] == 0 and not record["attempts"][0].get("stalls")
    assert stop_daemon(daemon) == 0, daemon_log(home)

    # The limit has lifted: the server answers again, and the reset is in the past.
    quota["on"] = False
    run_id = record["id"]
    path = home / "state" / "runs" / run_id / "run.toml"
    data = tomllib.loads(path.read_text())
    data["resume_at"] = datetime.now(UTC) - timedelta(minutes=1)
    path.write_text(tomli_w.dumps(data))
    daemon = start_daemon(home, env=env)
    daemons.append(daemon)
    done = wait_for(
        lambda: next((r for r in runs(home) if r.get("outcome")), None),
        timeout=150,
        what="the resumed run's end",
    )
    assert done["outcome"] == "succeeded", (done.get("reason"), daemon_log(home)[-3000:])
    (attempt,) = done["attempts"]
    assert attempt["nudges"] == 0 and attempt["session_id"] == park["session_id"]
    assert git(repo, "show", f"{done['branch']}:calc.py") + "\n" == FIXED

    # The same session, resumed with `--resume`, and the task sent again with it.
    transcript = transcript_text(home / "state" / "runs" / run_id / "attempt-1")
    starts = [
        e
        for e in map(_json, transcript.splitlines())
        if e.get("stream") == "loopd" and e.get("type") == "process" and e.get("event") == "started"
    ]
    assert len(starts) == 2
    argv = shlex.split(starts[1]["argv"])
    assert argv[argv.index("--resume") + 1] == park["session_id"]
    assert TASK in argv[-1] and "usage limit" in argv[-1]
    resumed = [t for t in map(Turn, model_server.chat_requests()) if t.is_agent and t.has_task()]
    assert resumed, "no agent request carried the task after the resume"
    types = [e["type"] for e in events(home) if e["run"] == run_id]
    assert types.count("quota_wait") == 1 and "quota_resumed" in types
    assert stop_daemon(daemon) == 0


def _json(line: str) -> dict[str, Any]:
    import json

    return json.loads(line) if line.strip() else {}
