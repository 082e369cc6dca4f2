"""End to end: the real Qwen Code CLI reaches `loopd mcp` through its per-run MCP
configuration, inside the sandbox, and calls record_evidence; loopd runs the command itself
and evidence.jsonl gets the line.

The scripted model (tests/model_server.py) decides the agent's tool calls: it reads calc.py,
writes the fix, then calls loopd's record_evidence tool under whatever name qwen lists it.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.model_server import ScriptedModelServer, Spec
from tests.sandboxing import require_bwrap
from tests.test_e2e_qwen import (
    QWEN,
    Turn,
    agent_script,
    read_calc,
    run_loop,
    stdout_events,
    write_fix,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(QWEN is None, reason="the real qwen CLI is needed (see test_e2e_qwen)"),
]

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
