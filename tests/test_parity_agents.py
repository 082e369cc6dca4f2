"""The real agent programs on both engines: the same session, nudged, recorded alike.

For each of Codex, Claude Code, Gemini CLI and aider, the scenario of its live test's first
test (tests/test_live_PROGRAM.py: an edit, checks that still fail, a nudge into the same
session, an answer), with that test's scripted provider server and script, on a local and a
Temporal machine (tests/test_parity.py's `on_both`); their run records compared field by field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import tomli_w

import tests.test_live_aider as aider
import tests.test_live_claude as claude
import tests.test_live_codex as codex
import tests.test_live_gemini as gemini
from tests.helpers import make_home, make_repo
from tests.machines import BUGGY, Machine, loop_toml
from tests.model_server import ScriptedModelServer
from tests.providers.anthropic import AnthropicServer
from tests.providers.gemini import ScriptedGeminiServer
from tests.providers.openai_responses import ResponsesServer
from tests.test_engines import LOOP, machines
from tests.test_parity import on_both

__all__ = ["machines"]  # a fixture, imported for pytest


@dataclass(frozen=True)
class Program:
    """One agent program as its live test runs it: its server, profile, task and ending."""

    name: str  # the executable and the profile's adapter
    binary: Path | None
    serve: Callable[[], Any]  # the live test's server, holding its edit-then-answer script
    profile: Callable[[Any], dict[str, Any]]  # the profile's fields, on that server
    env: dict[str, str]
    task: str
    nudge: str
    outcome: str
    # How many of the server's requests carried the nudge and the first session's work.
    resumed: Callable[[Any], int]
    files: dict[str, str] = field(default_factory=lambda: dict(BUGGY))
    loop: dict[str, Any] = field(default_factory=dict)
    user_files: dict[str, str] = field(default_factory=dict)  # in the machines' HOME
    # Whether it names its session (aider has none: its nudge restores the chat history).
    session: bool = True
    # Its counts as it prints them, rounded ("Tokens: 2.3k sent"): a prompt one character
    # longer on one machine moves an answer's count by 100. Compared within that, an answer
    # at a time (aider: its answer and the nudge's), not to the token.
    rounded_answers: int = 0


# The token fields of a run's record, its attempts' too.
TOKENS = ("tokens", "input_tokens", "output_tokens")
TOKEN_PATHS = frozenset(path for key in TOKENS for path in (f"[0].{key}", f"[0].attempts[0].{key}"))


PROGRAMS = [
    Program(
        name="codex",
        binary=codex.CODEX,
        serve=lambda: ResponsesServer(codex.agent_script(codex.wrong_then_right)),
        profile=lambda server: {
            "adapter": "codex",
            "model": codex.MODEL,
            "base_url": server.base_url,
            "api_key_env": "LOOPD_TEST_CODEX_KEY",
        },
        env={"LOOPD_TEST_CODEX_KEY": "sk-test-loopd-codex-0123456789"},
        task=codex.TASK,
        nudge=codex.NUDGE,
        outcome="succeeded",
        resumed=lambda server: sum(
            t.nudged and "call_fix_1" in t.output_ids() for t in codex.agent_turns(server)
        ),
    ),
    Program(
        name="claude",
        binary=claude.CLAUDE,
        serve=lambda: AnthropicServer(claude.agent_script(claude.wrong_then_right)),
        profile=claude.profile,
        env={claude.KEY_ENV: claude.KEY},
        task=claude.TASK,
        nudge=claude.NUDGE,
        outcome="succeeded",
        resumed=lambda server: sum(
            t.nudged and "toolu_edit_1" in t.tool_result_ids() for t in claude.agent_turns(server)
        ),
    ),
    Program(
        name="gemini",
        binary=gemini.GEMINI,
        serve=lambda: ScriptedGeminiServer(
            gemini.agent_script(gemini.wrong_then_right), models=[gemini.MODEL]
        ),
        profile=lambda server: {
            "adapter": "gemini",
            "model": gemini.MODEL,
            "base_url": server.base_url,
            "api_key_env": gemini.KEY_ENV,
            "env": {"GEMINI_TELEMETRY_ENABLED": "false"},
        },
        env={gemini.KEY_ENV: gemini.KEY},
        task=gemini.TASK,
        nudge=gemini.NUDGE,
        outcome="succeeded",
        resumed=lambda server: sum(
            gemini.nudged(c) and bool(c.function_responses())
            for c in server.calls("streamGenerateContent")
        ),
        # Gemini CLI starts in seconds of silence on a busy machine: not a stall.
        loop={"attempt_timeout": "240s", "stall_after": "120s"},
        user_files={".gemini/settings.json": json.dumps(gemini.USER_SETTINGS)},
    ),
    Program(
        name="aider",
        binary=aider.AIDER,
        serve=lambda: ScriptedModelServer(aider.edit_then_answer),
        profile=lambda server: {
            "adapter": "aider",
            "model": "test-model",
            "base_url": server.base_url,
            "api_key_env": "LOOPD_TEST_AIDER_KEY",
        },
        env={"LOOPD_TEST_AIDER_KEY": "sk-aider-test"},
        task=aider.TASK,
        nudge=aider.NUDGE,
        # Its checks want what it never writes: escalated after the nudge, on both engines.
        outcome="escalated",
        resumed=lambda server: sum(
            aider.nudged(r) and aider.carries_history(r) for r in server.chat_requests()
        ),
        files={"hello.txt": aider.BEFORE, "check.py": aider.CHECK},
        # aider's start (litellm's import) is silent for up to a minute on a loaded machine.
        loop={"attempt_timeout": "300s", "stall_after": "120s"},
        session=False,
        rounded_answers=2,
    ),
]


def make_machine(folder: Path, engine: str, program: Program, server: Any) -> Machine:
    """One machine with loop `calc` on `program`'s repository, its profile `a` on `server`."""
    # Paths of one length on both machines ("local", "temporal"): the scripted servers count
    # tokens by the prompt's length, and the prompt names the run's worktree.
    root = folder.parent / folder.name.ljust(len("temporal"), "_") / "machine"
    repo = make_repo(root / "src" / "app", program.files)
    for name, text in program.user_files.items():  # Machine.env's HOME
        path = root / "user" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    agent = tomli_w.dumps({"agents": {"a": program.profile(server)}})
    text = agent + f'\n[limits]\nworktrees = "{root / "worktrees"}"\n' + engine
    loop = {**LOOP, "task": program.task, "nudge": program.nudge, "max_nudges": 1, **program.loop}
    home = make_home(root / "loopd-home", text, {"calc": loop_toml(repo, **loop)})
    return Machine("machine", root, home, repo)


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_a_session_nudged_into_its_own_is_recorded_alike(
    program: Program,
    tmp_path: Path,
    temporal: Any,
    machines: list,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    assert program.binary is not None, f"the real {program.name} (see its live test)"
    (bin_dir / program.name).symlink_to(program.binary.resolve())
    # The machines' loopd processes take this environment: the program on PATH, its key, UTC.
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    for key, value in program.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("TZ", "UTC")

    with program.serve() as server:

        def setup(folder: Path, engine: str) -> Machine:
            return make_machine(folder, engine, program, server)

        def scenario(machine: Machine) -> int:
            machine.start("run")
            machine.loopd("trigger", "calc", "--wait")
            return 1

        known = TOKEN_PATHS if program.rounded_answers else frozenset()
        (run,) = on_both(tmp_path, temporal, machines, setup, scenario, known)
        resumed = program.resumed(server)

    assert run["outcome"] == program.outcome, run.get("reason")
    assert run["attempts"][0]["nudges"] == 1
    # Both records (compared above without ids) carry tokens and the session id, if any.
    for machine in machines:
        (record,) = machine.runs()
        assert record["tokens"] > 0
        assert bool(record["attempts"][0].get("session_id")) == program.session
    if program.rounded_answers:
        local, other = (machine.runs()[0] for machine in machines)
        for key in TOKENS:
            step = 100 * program.rounded_answers  # one rounding step an answer at most
            assert abs(local[key] - other[key]) <= step, (key, local[key], other[key])
    # Each machine's nudge carried its own first session's work to the server.
    assert resumed >= 2
