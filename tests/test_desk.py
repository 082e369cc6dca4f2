"""The agent's tools: their models, loopd's desk (token, rate, sizes), `loopd mcp` over real
stdio with the MCP SDK's client, `loopd-tool`, and each CLI's configuration format."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from daemon.agents.deskconfig import (
    DeskAccess,
    claude_config,
    codex_config,
    desk_access,
    merge_settings,
    opencode_server,
)
from daemon.agents.deskwire import (
    SOCKET_ENV,
    TOKEN_ENV,
    TOOLS,
    BadArguments,
    ask_desk,
    validated,
)
from daemon.cli.tool import parse
from daemon.extras import install_command
from daemon.rules.decisionlog import Decision
from daemon.runs.desk import Desk, DeskError, RateLimit
from daemon.state.agentrecords import (
    EvidenceLine,
    RecordsFull,
    append_decision,
    append_evidence,
    read_evidence,
    render_records,
)
from tests.helpers import ROOT

NOW = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)


class Recorder:
    """A desk's work that records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.refusals: list[tuple[str, str]] = []

    def __call__(self, tool: str, args: Any) -> str:
        if tool == "ask_person" and args.question == "fail":
            raise DeskError("could not file it")
        self.calls.append((tool, args))
        return f"done: {tool}"

    def refused(self, tool: str, why: str) -> None:
        self.refusals.append((tool, why))


@pytest.fixture
def desk(tmp_path: Path):
    work = Recorder()
    with Desk(tmp_path, work, work.refused) as opened:
        opened.work_log = work  # type: ignore[attr-defined]
        yield opened


# --- the tools' models -------------------------------------------------------------------


def test_each_tool_refuses_bad_arguments_naming_the_field() -> None:
    with pytest.raises(BadArguments, match="title: "):
        validated("record_decision", {"title": "", "why": "x"})
    with pytest.raises(BadArguments, match="command: Field required"):
        validated("record_evidence", {"claim": "it works"})
    with pytest.raises(BadArguments, match="kind: "):
        validated("note_knowledge", {"kind": "failure", "text": "t", "why": "w"})
    with pytest.raises(BadArguments, match="question: String should have at most 4000"):
        validated("ask_person", {"question": "?" * 4001})
    with pytest.raises(BadArguments, match="paths: List should have at most 50"):
        validated("rules_for", {"task": "t", "paths": ["a"] * 51})
    with pytest.raises(BadArguments, match="extra: Extra inputs are not permitted"):
        validated("ask_person", {"question": "q", "extra": 1})
    with pytest.raises(BadArguments, match="unknown tool 'rm_rf'"):
        validated("rm_rf", {})
    ok = validated("record_decision", {"title": " A ", "why": "b", "alternatives": ["c"]})
    assert ok.model_dump() == {"title": "A", "why": "b", "alternatives": ["c"]}


# --- the desk ----------------------------------------------------------------------------


def test_the_desk_answers_a_call_with_its_token(desk: Desk) -> None:
    reply = ask_desk(desk.path, desk.token, "ask_person", {"question": "which db?"})
    assert reply.ok and reply.text == "done: ask_person"
    assert desk.work_log.calls[0][1].question == "which db?"  # type: ignore[attr-defined]


def test_the_desk_refuses_another_runs_token_and_none(desk: Desk) -> None:
    other_last = "B" if desk.token.endswith("A") else "A"
    for token in ("", "x" * 43, desk.token[:-1] + other_last):
        reply = ask_desk(desk.path, token, "ask_person", {"question": "q"})
        assert not reply.ok and "not bound to this run" in reply.text
    assert desk.work_log.calls == []  # type: ignore[attr-defined]
    assert [why for _, why in desk.work_log.refusals] == ["token"] * 3  # type: ignore[attr-defined]


def test_the_desk_refuses_bad_arguments_and_says_why(desk: Desk) -> None:
    reply = ask_desk(desk.path, desk.token, "record_evidence", {"claim": "x"})
    assert not reply.ok and "command: Field required" in reply.text
    reply = ask_desk(desk.path, desk.token, "ask_person", {"question": "fail"})
    assert not reply.ok and reply.text == "ask_person: could not file it"


def test_a_flooding_agent_gets_an_error_not_a_full_disk(tmp_path: Path) -> None:
    clock = iter(range(0, 10_000)).__next__  # one second a call
    work = Recorder()
    limit = RateLimit(per_minute=5, total=8, clock=lambda: float(clock()))
    with Desk(tmp_path, work, work.refused, limit=limit) as desk:
        answers = [
            ask_desk(desk.path, desk.token, "ask_person", {"question": "q"}) for _ in range(7)
        ]
        assert [a.ok for a in answers] == [True] * 5 + [False] * 2
        assert "at most 5 a minute" in answers[5].text
    assert len(work.calls) == 5


def test_a_call_too_large_is_refused_before_it_is_sent(desk: Desk) -> None:
    reply = ask_desk(desk.path, desk.token, "ask_person", {"question": "q" * 70_000})
    assert not reply.ok and "over 64000 bytes" in reply.text


def test_a_socket_path_longer_than_sun_path_works(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    work = Recorder()
    with Desk(deep, work, work.refused) as desk:
        assert len(str(desk.path)) > 108
        assert ask_desk(desk.path, desk.token, "ask_person", {"question": "q"}).ok


# --- the records' files --------------------------------------------------------------------


def test_decisions_and_evidence_are_appended_capped_and_rendered(tmp_path: Path) -> None:
    entry = Decision(title="Use SQLite", why="one file", alternatives="Postgres")
    append_decision(tmp_path, entry.markdown())
    line = EvidenceLine(
        ts=NOW,
        attempt=1,
        claim="the tests pass",
        command="pytest -q",
        commit="a" * 40,
        exit_code=1,
        output_tail="1 failed",
        refuted=True,
    )
    append_evidence(tmp_path, line)
    assert read_evidence(tmp_path)[0].refuted is True
    text = render_records(tmp_path, 10_000)
    assert "claim (attempt 1): the tests pass" in text and "exit 1, REFUTED" in text
    assert "## Use SQLite" in text and "Alternatives: Postgres" in text
    with pytest.raises(RecordsFull):
        append_decision(tmp_path, "x" * 1_000_001)


# --- each CLI's configuration --------------------------------------------------------------


def access() -> DeskAccess:
    return DeskAccess(
        ["/venv/bin/python", "-m", "daemon.cli.main", "mcp"],
        {TOKEN_ENV: "tok", SOCKET_ENV: "/s/desk.sock"},
    )


def test_qwen_and_gemini_settings_keep_what_they_hold(tmp_path: Path) -> None:
    path = tmp_path / ".gemini" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"security": {"auth": {"selectedType": "oauth"}}}))
    merge_settings(path, access())
    data = json.loads(path.read_text())
    assert data["security"] == {"auth": {"selectedType": "oauth"}}
    server = data["mcpServers"]["loopd"]
    assert server["command"] == "/venv/bin/python"
    assert server["args"] == ["-m", "daemon.cli.main", "mcp"]
    assert server["env"] == {TOKEN_ENV: "tok", SOCKET_ENV: "/s/desk.sock"}
    assert server["trust"] is True and server["timeout"] > 0


def test_a_link_the_agent_left_is_replaced_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    (home / ".qwen").symlink_to(outside)
    merge_settings(home / ".qwen" / "settings.json", access())
    assert list(outside.iterdir()) == []
    assert (home / ".qwen" / "settings.json").is_file()


def test_claude_codex_and_opencode_formats(tmp_path: Path) -> None:
    claude = json.loads(claude_config(tmp_path / "c.json", access()).read_text())
    assert claude["mcpServers"]["loopd"]["args"] == ["-m", "daemon.cli.main", "mcp"]
    toml = tmp_path / ".codex" / "config.toml"
    toml.parent.mkdir()
    toml.write_text('model = "o3"\n')
    codex_config(toml, access())
    data = tomllib.loads(toml.read_text())
    assert data["model"] == "o3"
    server = data["mcp_servers"]["loopd"]
    assert server["command"] == "/venv/bin/python" and server["env"][TOKEN_ENV] == "tok"
    assert server["tool_timeout_sec"] >= 60
    opencode = opencode_server(access())
    assert opencode["type"] == "local" and "args" not in opencode
    assert opencode["command"] == ["/venv/bin/python", "-m", "daemon.cli.main", "mcp"]
    assert opencode["environment"][SOCKET_ENV] == "/s/desk.sock"


# --- loopd-tool and loopd mcp against a real desk -------------------------------------------


def test_loopd_tool_parses_flags_named_as_the_parameters() -> None:
    tool, args = parse(["note-knowledge", "--kind", "skill", "--text", "t", "--why", "w",
                        "--paths", "a.py", "--paths", "b.py"])  # fmt: skip
    assert tool == "note_knowledge"
    assert args == {"kind": "skill", "text": "t", "why": "w", "paths": ["a.py", "b.py"]}
    with pytest.raises(ValueError, match="unknown flag '--nope'"):
        parse(["ask-person", "--nope", "x"])
    with pytest.raises(ValueError, match="unknown tool"):
        parse(["delete-everything"])


def test_loopd_tool_script_reaches_the_desk(tmp_path: Path, desk: Desk) -> None:
    access = desk_access(desk.path, desk.token, tmp_path / "bin")
    assert access.cli_dir is not None
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    proc = subprocess.run(
        [str(access.cli_dir / "loopd-tool"), "record-decision", "--title", "T", "--why", "W"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "done: record_decision"
    bad = subprocess.run(
        [str(access.cli_dir / "loopd-tool"), "record-decision", "--title", "T"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert bad.returncode == 1 and "why: Field required" in bad.stderr


def test_loopd_mcp_over_stdio_with_the_sdk_client(desk: Desk) -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "daemon.cli.main", "mcp"],
        env={"PATH": os.environ["PATH"], TOKEN_ENV: desk.token, SOCKET_ENV: str(desk.path)},
    )

    async def session() -> tuple[list[str], Any, Any]:
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as client:
                await client.initialize()
                tools = [t.name for t in (await client.list_tools()).tools]
                good = await client.call_tool(
                    "record_evidence", {"claim": "it works", "command": "true"}
                )
                bad = await client.call_tool("record_evidence", {"claim": "it works"})
                return tools, good, bad

    tools, good, bad = asyncio.run(session())
    assert tools == list(TOOLS)
    assert not good.isError and good.content[0].text == "done: record_evidence"
    assert bad.isError and "command: Field required" in bad.content[0].text
    tool, args = desk.work_log.calls[0]  # type: ignore[attr-defined]
    assert tool == "record_evidence" and args.command == "true"


def test_the_critic_reads_the_agents_claims_and_what_loopd_saw(tmp_path: Path) -> None:
    from daemon.model.evidence import RECORDS_HEADING, build_evidence

    run_dir = tmp_path / "run"
    attempt = run_dir / "attempt-1"
    attempt.mkdir(parents=True)
    (attempt / "checks.log").write_text("$ pytest\n1 passed\n")
    append_evidence(
        run_dir,
        EvidenceLine(
            ts=NOW,
            attempt=1,
            claim="empty input is handled",
            command="pytest -q tests/test_empty.py",
            commit="b" * 40,
            exit_code=1,
            output_tail="AssertionError: got None",
            refuted=True,
        ),
    )
    append_decision(run_dir, Decision(title="Parse lazily", why="memory").markdown())
    text = build_evidence(attempt, "the task", "all done", 4000).render()
    assert RECORDS_HEADING in text
    assert "empty input is handled" in text and "REFUTED" in text
    assert "AssertionError: got None" in text and "## Parse lazily" in text
    bare = tmp_path / "bare" / "attempt-1"
    bare.mkdir(parents=True)
    assert RECORDS_HEADING not in build_evidence(bare, "t", "s", 4000).render()


@pytest.mark.parametrize("name", ["qwen", "gemini", "codex", "claude", "opencode", "aider"])
def test_each_adapter_gets_the_server_where_its_cli_reads_it(name: str, tmp_path: Path) -> None:
    from daemon.agents.registry import adapter_class
    from daemon.config import AgentProfile

    cls = adapter_class(name)
    extra = {"model": "gpt-4o"} if name == "aider" else {}
    adapter = cls(AgentProfile(adapter=name, **extra), tmp_path, environ={})
    adapter.desk = access()
    adapter.write_tool_config(tmp_path)
    inv = adapter.invocation("do it")
    if name in ("qwen", "gemini"):
        settings = json.loads((tmp_path / f".{name}" / "settings.json").read_text())
        assert settings["mcpServers"]["loopd"]["env"][TOKEN_ENV] == "tok"
        assert settings["mcpServers"]["loopd"].get("alwaysLoadTools", False) is (name == "qwen")
    elif name == "codex":
        config = tomllib.loads((tmp_path / ".codex" / "config.toml").read_text())
        assert config["mcp_servers"]["loopd"]["args"][-1] == "mcp"
    elif name == "claude":
        path = inv.argv[inv.argv.index("--mcp-config") + 1]
        assert json.loads(Path(path).read_text())["mcpServers"]["loopd"]["env"][TOKEN_ENV]
    elif name == "opencode":
        config = json.loads(inv.env["OPENCODE_CONFIG_CONTENT"])
        assert config["mcp"]["loopd"]["type"] == "local"
    else:  # aider: loopd-tool on its PATH only; its HOME holds only its offline seeds
        assert not cls.speaks_mcp
        files = sorted(
            p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()
        )
        seeds = [".aider.model.settings.yml", ".aider/caches/model_prices_and_context_window.json"]
        assert files == seeds
        assert not any("mcp" in (tmp_path / p).read_text() for p in seeds)


def test_loopd_mcp_without_the_sdk_names_the_extra(tmp_path: Path) -> None:
    shim = tmp_path / "shim" / "mcp"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'mcp'\", name='mcp')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(shim.parent)}
    proc = subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", "mcp"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert install_command("mcp") in proc.stderr and "Traceback" not in proc.stderr


def test_one_run_cannot_write_into_another(tmp_path: Path) -> None:
    """Run A's binding against run B's desk (a path B's sandbox would never show A, but mode
    `off` shows everything): refused, and B's work is not touched."""
    work_a, work_b = Recorder(), Recorder()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with (
        Desk(tmp_path / "a", work_a, work_a.refused) as a,
        Desk(tmp_path / "b", work_b, work_b.refused) as b,
    ):
        assert a.token != b.token
        reply = ask_desk(b.path, a.token, "record_decision", {"title": "t", "why": "w"})
        assert not reply.ok and "not bound to this run" in reply.text
        assert ask_desk(a.path, a.token, "record_decision", {"title": "t", "why": "w"}).ok
    assert work_b.calls == [] and work_b.refusals == [("record_decision", "token")]
    assert [tool for tool, _ in work_a.calls] == ["record_decision"]
