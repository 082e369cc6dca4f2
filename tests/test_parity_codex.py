"""The real Codex CLI on both engines: the same session, nudged into its thread, recorded alike.

The scenario of tests/test_live_codex.py's first test (a wrong `apply_patch`, failing checks,
a nudge that resumes the thread, the right one) on a local and a Temporal machine
(tests/test_parity.py's `on_both`), their run records compared field by field.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.machines import Machine
from tests.providers.openai_responses import ResponsesServer
from tests.test_engines import machines, make_machine
from tests.test_live_codex import (
    CODEX,
    MODEL,
    NUDGE,
    TASK,
    agent_script,
    agent_turns,
    wrong_then_right,
)
from tests.test_parity import on_both

__all__ = ["machines"]  # a fixture, imported for pytest


def test_a_codex_session_nudged_into_its_thread_is_recorded_alike(
    tmp_path: Path, temporal: Any, machines: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    assert CODEX is not None
    (bin_dir / "codex").symlink_to(CODEX.resolve())
    # The machines' loopd processes take this environment: codex on PATH, its key, UTC.
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("LOOPD_TEST_CODEX_KEY", "sk-test-loopd-codex-0123456789")
    monkeypatch.setenv("TZ", "UTC")

    with ResponsesServer(agent_script(wrong_then_right)) as server:
        profile = (
            f'[agents.a]\nadapter = "codex"\nmodel = "{MODEL}"\n'
            f'base_url = "{server.base_url}"\napi_key_env = "LOOPD_TEST_CODEX_KEY"\n'
        )

        def setup(folder: Path, engine: str) -> Machine:
            return make_machine(folder, engine, profile, task=TASK, nudge=NUDGE, max_nudges=1)

        def scenario(machine: Machine) -> int:
            machine.start("run")
            assert machine.loopd("trigger", "calc", "--wait").returncode == 0
            return 1

        (run,) = on_both(tmp_path, temporal, machines, setup, scenario)
        turns = agent_turns(server)

    assert run["outcome"] == "succeeded", run.get("reason")
    assert run["attempts"][0]["nudges"] == 1
    # Both records (compared above without ids) carry the tokens and the thread id.
    for machine in machines:
        (record,) = machine.runs()
        assert (record["input_tokens"], record["output_tokens"]) == (4 * 1200, 4 * 30)
        assert record["attempts"][0]["session_id"]
    # Each machine's nudge carried its own first session's work to the server.
    resumed = [t for t in turns if t.nudged and t.answered == ""]
    assert len(resumed) == 2
    assert all("call_fix_1" in t.output_ids() for t in resumed)
