"""Landing with the real Qwen Code CLI: its fix merged into main, and the next run skipped.

The scripted OpenAI-compatible server answers qwen (tests/test_e2e_qwen.py); `loopd once`
runs as a subprocess, twice: the first run's fix lands on main (a fast-forward of the
person's clean checkout), the second finds main green and never starts qwen.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from tests.helpers import git, loopd
from tests.model_server import ScriptedModelServer, Spec
from tests.test_e2e_qwen import (  # noqa: F401 - pytestmark skips without qwen (fails in CI)
    FIXED,
    LOOP,
    Turn,
    agent_script,
    agent_turns,
    pytestmark,
    read_calc,
    run_loop,
    write_fix,
)


def test_qwens_fix_lands_on_main_and_the_next_run_is_skipped_without_qwen(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    def decide(turn: Turn) -> Spec:
        if turn.answered == "call_fix_1":
            return "Fixed add() in calc.py."
        if turn.answered == "call_read_1":
            return write_fix(turn, "call_fix_1")
        return read_calc(turn, "call_read_1")

    model_server.script(agent_script(decide))
    first = run_loop(tmp_path, model_server, land="merge")
    assert first.exit_code == 0, first.explain()
    assert first.run["outcome"] == "succeeded" and first.run["landed"] is True
    main = git(first.repo, "rev-parse", "main")
    assert first.run["landed_as"] == main
    assert (first.repo / "calc.py").read_text() == FIXED  # the clean checkout moved with main
    subject = git(first.repo, "log", "-1", "--format=%s", "main")
    assert subject.startswith(f"loopd({LOOP}): Fix add() in calc.py")
    assert subject.endswith(f"(run {first.run_id})")  # one commit: land_commits = "squash"
    body = git(first.repo, "log", "-1", "--format=%b", "main")
    assert "Checks that passed:\n- " in body and "check.py" in body.split("Checks that passed:")[1]
    assert "landed on main" in first.stdout
    asked = len(agent_turns(model_server))
    assert asked >= 2

    env = {"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    second = loopd(first.home, "once", LOOP, timeout=120, env=env)
    assert second.returncode == 0, second.stdout + second.stderr
    run_id = second.stdout.splitlines()[0]
    run = tomllib.loads((first.home / "state" / "runs" / run_id / "run.toml").read_text())
    assert run["outcome"] == "skipped" and run["base_commit"] == main
    assert run["tokens"] == 0 and run.get("attempts", []) == []
    assert len(agent_turns(model_server)) == asked  # qwen was not started again
