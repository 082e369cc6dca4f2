"""End to end: the real Qwen Code CLI reaches `loopd mcp` through its per-run MCP
configuration, inside the sandbox, and calls record_evidence; loopd runs the command itself
and evidence.jsonl gets the line.

The scripted model (tests/model_server.py) decides the agent's tool calls: it reads calc.py,
writes the fix, then calls loopd's record_evidence tool under whatever name qwen lists it.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from tests.helpers import loopd, make_home, make_repo
from tests.model_server import ScriptedModelServer, Spec
from tests.sandboxing import require_bwrap
from tests.test_adapters import find_opencode
from tests.test_e2e_qwen import (
    BUGGY,
    CHECK,
    QWEN,
    TASK,
    Turn,
    agent_script,
    read_calc,
    run_loop,
    stdout_events,
    write_fix,
)

pytestmark = pytest.mark.e2e

CLAIM = "add() returns the sum: check.py passes"


def tool_named(turn: Turn, suffix: str) -> str:
    """The name qwen gives loopd's tool in the tools it sends the model."""
    names = [
        t.get("function", {}).get("name", "")
        for t in turn.body.get("tools") or []
        if isinstance(t, dict)
    ]
    found = [n for n in names if n.endswith(suffix)]
    assert found, f"qwen listed no {suffix} tool: {names}"
    return found[0]


@pytest.mark.skipif(QWEN is None, reason="the real qwen CLI is needed (see test_e2e_qwen)")
def test_qwen_calls_record_evidence_through_its_mcp_config(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    command = f"{shlex.quote(sys.executable)} check.py"

    def decide(turn: Turn) -> Spec:
        if turn.answered == "call_evidence_1":
            return "Fixed add() in calc.py; loopd checked my claim."
        if turn.answered == "call_fix_1":
            name = tool_named(turn, "record_evidence")
            call: dict[str, Any] = {"claim": CLAIM, "command": command}
            return {"tool_calls": [{"name": name, "id": "call_evidence_1", "arguments": call}]}
        if turn.answered == "call_read_1":
            return write_fix(turn, "call_fix_1")
        return read_calc(turn, "call_read_1")

    model_server.script(agent_script(decide))
    outcome = run_loop(tmp_path, model_server)

    assert outcome.exit_code == 0, outcome.explain()
    lines = (outcome.run_dir / "evidence.jsonl").read_text().splitlines()
    assert len(lines) == 1, lines
    line = json.loads(lines[0])
    assert line["claim"] == CLAIM and line["command"] == command
    assert line["exit_code"] == 0 and line["refuted"] is False and line["attempt"] == 1
    assert len(line["commit"]) == 40
    [event] = outcome.events("evidence_recorded")
    assert event["commit"] == line["commit"] and event["refuted"] is False
    assert [e["tools"] for e in outcome.events("desk_opened")] == [["mcp", "cli"]]
    # The answer went back to the model through qwen's tool result.
    results = stdout_events(outcome, "tool_result")
    results = [r for r in results if r["call_id"] == "call_evidence_1"]
    assert results and "the claim holds" in results[0]["output"], results
    require_bwrap()
    assert [e["in_force"] for e in outcome.events("sandbox")] == ["bwrap"]


# --- opencode ----------------------------------------------------------------------------------

OPENCODE = find_opencode()
FIX_COMMAND = "sed -i 's/a - b/a + b/' calc.py"


def opencode_decide(command: str) -> Any:
    """bash (the fix), then loopd's record_evidence, then the final text: counted by the tool
    results since the last user message."""

    def reply(body: dict[str, Any]) -> Spec:
        messages = body.get("messages") or []
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
        done = sum(1 for m in messages[last_user:] if m.get("role") == "tool")
        if not body.get("tools"):
            return "A title"
        if done == 0:
            arguments = {"command": FIX_COMMAND, "description": "Fix add"}
            return {"tool_calls": [{"name": "bash", "arguments": arguments}]}
        if done == 1:
            name = tool_named(Turn(body), "record_evidence")
            call = {"claim": CLAIM, "command": command}
            return {"tool_calls": [{"name": name, "id": "call_evidence_1", "arguments": call}]}
        return "Fixed add() in calc.py; loopd checked my claim."

    return reply


@pytest.mark.skipif(OPENCODE is None, reason="the opencode CLI is not installed")
def test_opencode_calls_record_evidence_through_its_mcp_config(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    command = f"{shlex.quote(sys.executable)} check.py"
    model_server.script(opencode_decide(command))
    repo = make_repo(tmp_path / "repo", {"calc.py": BUGGY, "check.py": CHECK})
    profile = {"adapter": "opencode", "model": "test-model", "base_url": model_server.base_url}
    fields = {
        "repo": str(repo),
        "task": TASK,
        "agent": "oc",
        "done_when": [command],
        "check_timeout": "60s",
        "max_attempts": 1,
        "attempt_timeout": "120s",
        "stall_after": "120s",
    }
    config = tomli_w.dumps({"agents": {"oc": profile}})
    home = make_home(tmp_path / "home", config, {"fix": tomli_w.dumps(fields)})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    assert OPENCODE is not None
    (bin_dir / "opencode").symlink_to(Path(OPENCODE).resolve())
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = loopd(home, "once", "fix", timeout=240, env=env)
    run_id = proc.stdout.splitlines()[0].strip()
    run_dir = home / "state" / "runs" / run_id
    run = tomllib.loads((run_dir / "run.toml").read_text())
    assert run["outcome"] == "succeeded", (run.get("reason"), proc.stderr[-3000:])
    lines = [json.loads(x) for x in (run_dir / "evidence.jsonl").read_text().splitlines()]
    assert [(x["claim"], x["command"], x["exit_code"], x["refuted"]) for x in lines] == [
        (CLAIM, command, 0, False)
    ]
    requests = model_server.chat_requests()
    answered = [
        m
        for body in requests
        for m in body.get("messages") or []
        if m.get("role") == "tool" and "the claim holds" in str(m.get("content"))
    ]
    assert answered, "opencode did not hand loopd's answer back to the model"
    require_bwrap()
    events = [json.loads(x) for x in (home / "state" / "events.jsonl").read_text().splitlines()]
    assert [e["in_force"] for e in events if e["type"] == "sandbox"] == ["bwrap"]
