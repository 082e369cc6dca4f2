"""The agent adapters: one shared suite over recorded stream lines, driven by what each declares."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from daemon.agents.base import AgentAdapter, AgentEvent, Resume, is_denial
from daemon.agents.deskconfig import DeskAccess
from daemon.agents.endings import (
    ended_on_question,
    final_text,
    permission_denied,
    repeated_tool_call,
)
from daemon.agents.registry import adapter_class
from daemon.agents.testing import GARBAGE, AdapterSuite, Recording
from daemon.config import ADAPTERS, AgentProfile

ROOT_DATA = Path(__file__).parent / "data"
STREAMS = ROOT_DATA / "streams"
ALL = sorted(ADAPTERS)
AGENTS = [name for name in ALL if name != "command"]

# What the recorded lines hold (see tests/data/streams/README.md).
EXPECTED: dict[str, dict[str, Any]] = {
    "qwen": {
        "session": "32fd1db6-3eaf-48e0-8a5a-4255f900404e",
        "final": "Done: the shell said hello. The task is complete.",
        "usage": (2500, 42, 0.0),
    },
    "claude": {
        "session": "73399597-5926-49b6-9d37-639422d52656",
        "final": "Changed hello.txt: it says hi now.",
        "usage": (8624, 68, 0.035856),
    },
    "codex": {
        "session": "01a24e9c-f885-7032-9d87-684deb6e1e81",
        "final": "Changed add() in calc.py.",
        "usage": (2400, 60, 0.0),  # two model calls of 1200 in, 30 out
    },
    "opencode": {
        "session": "ses_494719016ffe85dkDMj0FPRbHK",
        "final": "Fixed the off-by-one in app.py; the tests pass.",
        "usage": (1450 + 9000 + 300 + 10400, 62 + 40, 0.0021 + 0.0012),
    },
    "gemini": {
        "session": "d0390a5b-8999-4524-8190-a97dbcfd5b12",
        "final": "Fixed the off-by-one in app.py: first() returns the whole list now, and the "
        "test passes.",
        "usage": (1200 + 1640 + 2210, 30 + 61 + 24, 0.0),
    },
    # The model's answer, not aider's last line ("Applied edit to hello.txt").
    "aider": {
        "final": "I will change hello.txt.\n\nhello.txt\n```\nhello, world\n```\n\n"
        "hello.txt now says hello, world.",
        "usage": (728, 25, 0.0),
    },
    "command": {"final_contains": "Fixed the off-by-one in first() in app.py."},
}


def make(name: str, tmp_path: Path | None = None, **profile: Any) -> AgentAdapter:
    fields = {"adapter": name, **profile}
    if name == "command" and "command" not in fields:
        fields["command"] = ["my-agent", "--task", "{prompt}"]
    home = tmp_path / "agent-home" if tmp_path else None
    return adapter_class(name)(AgentProfile(**fields), private_home=home, environ={})


def stream_lines(name: str) -> list[str]:
    path = STREAMS / f"{name}.jsonl"
    if not path.exists():
        path = STREAMS / f"{name}.txt"
    return path.read_text().splitlines()


def parse_all(adapter: AgentAdapter, lines: list[str]) -> list[AgentEvent]:
    events: list[AgentEvent] = []
    for line in lines:
        events += adapter.parse_line(line)
    return events


def recording(name: str, stream: str = "") -> Recording:
    """A shipped adapter's recorded stream with what tests/data/streams/README.md says it holds."""
    stream = stream or name
    path = STREAMS / f"{stream}.jsonl"
    if not path.exists():
        path = STREAMS / f"{stream}.txt"
    expected = EXPECTED[stream]
    profile = {"command": ["my-agent", "--task", "{prompt}"]} if name == "command" else {}
    return Recording(
        name,
        path,
        session=expected.get("session", ""),
        final=expected.get("final", ""),
        final_contains=expected.get("final_contains", ""),
        usage=expected.get("usage"),
        profile=profile,
    )


# --- the shared suite over recorded lines (daemon/agents/testing.py, a plugin's too) ---------


def test_registry_resolves_every_adapter_with_its_name() -> None:
    for name in ALL:
        assert adapter_class(name).name == name


class TestShippedAdapters(AdapterSuite):
    """The shared suite over every shipped adapter's recording, and the real codex and
    opencode ones (their EXPECTED entries are below)."""

    @property
    def recordings(self) -> list[Recording]:  # a property: EXPECTED grows further down
        return [recording(name) for name in ALL] + [
            recording(adapter, stream) for stream, adapter in sorted(REAL.items())
        ]


# --- recorded qwen specifics: denial, question, error ----------------------------------------


def test_qwen_denied_permission_is_marked() -> None:
    events = parse_all(make("qwen"), stream_lines("qwen-denied"))
    denied = [event for event in events if event.type == "tool_result" and event.denied]
    assert [event.call_id for event in denied] == ["call_wr_1"]
    assert permission_denied(events)
    assert not permission_denied(parse_all(make("qwen"), stream_lines("qwen")))


def test_claude_denied_permission_is_marked() -> None:
    events = parse_all(make("claude"), stream_lines("claude-denied"))
    denied = [event.call_id for event in events if event.type == "tool_result" and event.denied]
    assert denied == ["toolu_01YYFVhDQ23gEi3n4XxGxZyz"]


def test_claude_resumed_session_keeps_its_id() -> None:
    events = parse_all(make("claude"), stream_lines("claude-resume.real"))
    assert {e.session_id for e in events if e.type == "session"} == {EXPECTED["claude"]["session"]}
    assert final_text(events) == "Continued: hello.txt already says hi."


def test_claude_refused_key_is_a_login_error_and_its_retries_are_notices() -> None:
    # Recorded: a 401 `authentication_error` from the API, with CLAUDE_CODE_MAX_RETRIES=2.
    events = parse_all(make("claude"), stream_lines("claude-401.real"))
    notices = [event.text for event in events if event.type == "notice"]
    assert len(notices) == 2
    assert notices[0].startswith("API request failed (authentication_failed, HTTP 401)")
    assert "retry 1 of 2 in 0.6s" in notices[0]
    errors = [event for event in events if event.type == "error"]
    assert [(e.text, e.login, e.quota) for e in errors] == [
        ("Invalid API key · Fix external API key", True, False)
    ]
    assert [(e.text, e.is_error) for e in events if e.type == "final"] == [
        ("Invalid API key · Fix external API key", True)
    ]
    assert not [event for event in events if event.type == "raw" and event.text != GARBAGE]


def test_claude_retry_that_worked_is_a_notice_and_no_error() -> None:
    events = parse_all(make("claude"), stream_lines("claude-retry.real"))
    assert [e.type for e in events if e.type in ("notice", "error")] == ["notice"]
    assert [(e.text, e.is_error) for e in events if e.type == "final"] == [
        ("Done after a retry.", False)
    ]


def test_qwen_resumed_session_keeps_its_id_and_ends_on_a_question() -> None:
    events = parse_all(make("qwen"), stream_lines("qwen-question"))
    assert [e.session_id for e in events if e.type == "session"] == [EXPECTED["qwen"]["session"]]
    assert ended_on_question(final_text(events))
    assert not ended_on_question(final_text(parse_all(make("qwen"), stream_lines("qwen"))))


def test_qwen_missing_key_is_an_error_final() -> None:
    events = parse_all(make("qwen"), stream_lines("qwen-nokey"))
    errors = [event.text for event in events if event.type == "error"]
    assert errors and "Missing API key" in errors[0]
    assert [event.is_error for event in events if event.type == "final"] == [True]


# --- invocations: DESIGN.md section 9 --------------------------------------------------------

PROMPT = "# Task\nMake the failing tests pass."
SID = "sess-1234"
NUDGE = "Continue the task. If something blocks you, say exactly what."
LOCAL = "http://127.0.0.1:8000/v1"
KEY = "sk-test-0123456789abcdef"

FIRST_RUN = {
    "qwen": [
        "qwen",
        "--output-format",
        "stream-json",
        "--approval-mode",
        "yolo",
        "--auth-type",
        "openai",
    ],
    "claude": ["claude", "-p", PROMPT, "--output-format", "stream-json", "--verbose"],
    "codex": ["codex", "exec", "--json"],
    "opencode": ["opencode", "run", "--format", "json"],
    "gemini": ["gemini", "-p", PROMPT, "--output-format", "stream-json"],
    "aider": ["aider", "--message", PROMPT, "--yes-always"],
}
KEY_VAR = {
    "qwen": "OPENAI_API_KEY",
    "claude": "ANTHROPIC_API_KEY",
    "codex": "OPENAI_API_KEY",
    "opencode": "OPENAI_API_KEY",
    "gemini": "GEMINI_API_KEY",
    "aider": "OPENAI_API_KEY",
}


def local_adapter(name: str, tmp_path: Path) -> AgentAdapter:
    adapter = adapter_class(name)(
        AgentProfile(
            adapter=name,
            model="qwen3-coder",
            base_url=LOCAL,
            api_key_env="MY_AGENT_KEY",
            args=["--extra-flag"],
            env={"PROFILE_VAR": "1"},
        ),
        private_home=tmp_path / "agent-home",
        environ={"MY_AGENT_KEY": KEY, "OPENAI_API_KEY": "not-this-one"},
    )
    return adapter


@pytest.mark.parametrize("name", AGENTS)
def test_first_run_has_the_design_shape(name: str, tmp_path: Path) -> None:
    inv = local_adapter(name, tmp_path).invocation(PROMPT)
    prefix = FIRST_RUN[name]
    assert inv.argv[: len(prefix)] == prefix
    assert inv.argv.count(PROMPT) == 1
    assert inv.stdin is None  # /dev/null: several agents read stdin until EOF
    assert "--extra-flag" in inv.argv
    assert "PROFILE_VAR" not in inv.env  # the caller adds the profile's env, once


@pytest.mark.parametrize("name", AGENTS)
def test_model_base_url_and_key_reach_the_agent(name: str, tmp_path: Path) -> None:
    adapter = local_adapter(name, tmp_path)
    inv = adapter.invocation(PROMPT)
    assert any("qwen3-coder" in part for part in inv.argv)
    # The endpoint is in argv, the environment, or the configuration the adapter writes into
    # the run's HOME before the agent starts (codex: a provider in ~/.codex/config.toml).
    home = tmp_path / "agent-home"
    adapter.write_tool_config(home)
    written = [path.read_text() for path in home.rglob("*") if path.is_file()]
    assert (
        any(LOCAL in part for part in inv.argv)
        or LOCAL in json.dumps(inv.env)
        or any(LOCAL in text for text in written)
    )
    assert inv.env[KEY_VAR[name]] == KEY
    assert not any(KEY in part for part in inv.argv), "the key must not be visible in argv"


@pytest.mark.parametrize("name", AGENTS)
def test_the_agent_starts_in_the_home_its_caller_gives(name: str, tmp_path: Path) -> None:
    # Every run gives its agent a HOME of its own (daemon/agents/homes.py), whatever the
    # endpoint; the adapter starts the agent there.
    assert local_adapter(name, tmp_path).invocation(PROMPT).home == tmp_path / "agent-home"
    remote = adapter_class(name)(
        AgentProfile(adapter=name, base_url="https://api.example.com/v1"),
        private_home=tmp_path / "run-home",
        environ={},
    )
    assert remote.invocation(PROMPT).home == tmp_path / "run-home"


@pytest.mark.parametrize("name", AGENTS)
def test_follow_up_continues_the_session(name: str, tmp_path: Path) -> None:
    inv = local_adapter(name, tmp_path).invocation(PROMPT, Resume(session_id=SID, message=NUDGE))
    argv = inv.argv
    assert PROMPT not in argv and argv.count(NUDGE) == 1
    if name == "codex":
        assert argv[:3] == ["codex", "exec", "--json"]
        assert argv[-3:] == ["resume", SID, NUDGE]
    elif name == "aider":
        assert "--restore-chat-history" in argv and SID not in argv
    else:
        flag = {"opencode": "--session"}.get(name, "--resume")
        assert argv[argv.index(flag) + 1] == SID
    assert inv.env[KEY_VAR[name]] == KEY


@pytest.mark.parametrize("name", ["qwen", "codex", "opencode"])
def test_prompt_that_looks_like_an_option_stays_a_prompt(name: str) -> None:
    argv = make(name).invocation("--help me").argv
    assert argv[-1] == " --help me"


def test_keyless_local_endpoint_gets_a_placeholder_key_for_qwen() -> None:
    adapter = make("qwen", base_url=LOCAL)
    assert adapter.invocation(PROMPT).env["OPENAI_API_KEY"]
    assert "OPENAI_API_KEY" not in make("qwen").invocation(PROMPT).env


def test_codex_custom_provider_and_opencode_config_are_well_formed(tmp_path: Path) -> None:
    codex = adapter_class("codex")(
        AgentProfile(adapter="codex", model="m", base_url=LOCAL, api_key_env="MY_AGENT_KEY"),
        private_home=tmp_path / "agent-home",
        environ={"MY_AGENT_KEY": KEY},
    )
    assert codex.invocation(PROMPT).argv[:3] == ["codex", "exec", "--json"]
    codex.write_tool_config(tmp_path / "agent-home")
    config = tomllib.loads((tmp_path / "agent-home" / ".codex" / "config.toml").read_text())
    assert config["model_provider"] == "loopd"
    assert config["model_providers"]["loopd"] == {
        "name": "loopd",
        "base_url": LOCAL,
        "wire_api": "responses",
        "env_key": "OPENAI_API_KEY",
    }
    assert KEY not in json.dumps(config)  # the key stays in the environment
    assert config["check_for_update_on_startup"] is False
    assert config["analytics"] == {"enabled": False}


def test_codex_started_without_a_desk_still_gets_its_endpoint(tmp_path: Path) -> None:
    # `loopd check`'s login try starts the agent with no desk and writes no tool config: the
    # invocation itself leaves the provider in the HOME codex starts with.
    home = tmp_path / "agent-home"
    codex = adapter_class("codex")(
        AgentProfile(adapter="codex", base_url=LOCAL), private_home=home, environ={}
    )
    assert codex.invocation(PROMPT).home == home
    config = tomllib.loads((home / ".codex" / "config.toml").read_text())
    assert config["model_providers"]["loopd"]["base_url"] == LOCAL
    assert "env_key" not in config["model_providers"]["loopd"]  # no key named: none sent
    assert "mcp_servers" not in config
    opencode = make("opencode", model="m", base_url=LOCAL).invocation(PROMPT)
    config = json.loads(opencode.env["OPENCODE_CONFIG_CONTENT"])
    assert config["provider"]["loopd"]["options"]["baseURL"] == LOCAL
    assert "m" in config["provider"]["loopd"]["models"]
    assert opencode.argv[opencode.argv.index("-m") + 1] == "loopd/m"


def test_command_agent_takes_the_prompt_in_argv_or_on_stdin() -> None:
    inv = make("command", command=["my-agent", "--task", "{prompt}"], env={"A": "1"}).invocation(
        PROMPT
    )
    assert inv.argv == ["my-agent", "--task", PROMPT] and inv.stdin is None
    piped = make("command", command=["my-agent"]).invocation(PROMPT)
    assert piped.argv == ["my-agent"] and piped.stdin == PROMPT.encode()
    adapter = make("command")
    assert not adapter.session_resume  # a nudge is a new process with the whole prompt


# --- endings ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "I looked at the code. Should I also update the tests, or leave them?",
        "Two options:\n\n1. patch `first()`\n2. rewrite it\n\nWhich approach would you prefer?",
        "I found the bug.\n\nPlease confirm that I may delete `legacy/`.",
        "Done with step one. Let me know whether you want the migration too.",
        "**Would you like me to proceed?**",
    ],
)
def test_ended_on_question(text: str) -> None:
    assert ended_on_question(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Fixed the off-by-one in app.py; all tests pass.",
        "Why did it fail? The index started at 1. Fixed it; the tests pass.",
        "All tests pass. Is there anything else you'd like me to do?",
        "Done. Let me know if you need anything else.",
        "Here is the fix:\n\n```python\nif ready():\n    go()  # why?\n```",
    ],
)
def test_did_not_end_on_question(text: str) -> None:
    assert not ended_on_question(text)


def call(tool: str, **arguments: Any) -> AgentEvent:
    return AgentEvent(
        type="tool_call", tool=tool, call_id=f"c{len(arguments)}", arguments=arguments
    )


def test_repeated_tool_call() -> None:
    same = [call("bash", command="pytest -q"), AgentEvent(type="text", text="again")] * 3
    assert repeated_tool_call(same)
    assert not repeated_tool_call(same[:4])
    mixed = [call("bash", command="pytest -q"), call("bash", command="pytest -x")] * 3
    assert not repeated_tool_call(mixed)
    other_tool = [
        call("bash", command="ls"),
        call("bash", command="ls"),
        call("read", command="ls"),
    ]
    assert not repeated_tool_call(other_tool)
    reordered = [
        AgentEvent(type="tool_call", tool="edit", arguments={"a": 1, "b": 2}),
        AgentEvent(type="tool_call", tool="edit", arguments={"b": 2, "a": 1}),
    ]
    assert repeated_tool_call(reordered, times=2)


@pytest.mark.parametrize(
    ("output", "denied"),
    [
        (
            'Qwen Code requires permission to use "write_file", but that permission was declined.',
            True,
        ),
        ("Claude requested permissions to use Edit, but you haven't granted it yet.", True),
        ("The user rejected permission to use this specific tool call.", True),
        ("ls: cannot open directory '/root': Permission denied", False),
        ("bash: ./run.sh: Permission denied", False),
        ("FAILED tests/test_perms.py::test_denied - assert False", False),
    ],
)
def test_denial_wording(output: str, denied: bool) -> None:
    assert is_denial(output) is denied


def test_permission_denied_needs_a_denied_result() -> None:
    failed = AgentEvent(type="tool_result", call_id="1", is_error=True, output="No such file")
    assert not permission_denied([failed])
    assert permission_denied([failed, AgentEvent(type="tool_result", call_id="2", denied=True)])


def test_final_text_falls_back_to_the_trailing_text() -> None:
    events = [
        AgentEvent(type="text", text="early"),
        AgentEvent(type="usage", input_tokens=1),
        AgentEvent(type="text", text="last words"),
        AgentEvent(type="text", text="the end"),
    ]
    assert final_text(events) == "last words\nthe end"
    assert final_text([*events, AgentEvent(type="final", text="summary")]) == "summary"
    assert final_text([]) == ""


# --- the real qwen CLI against a scripted OpenAI-compatible server ---------------------------


def find_qwen() -> str | None:
    for candidate in (
        os.environ.get("LOOPD_TEST_QWEN", ""),
        shutil.which("qwen") or "",
        "/tmp/qwenpkg/node_modules/.bin/qwen",
    ):
        if candidate and Path(candidate).exists():
            return candidate
    return None


class ScriptedChat(ThreadingHTTPServer):
    """Answers /v1/chat/completions from a script, streaming (SSE) or not; logs each request."""

    def __init__(self, script: list[dict[str, Any]]) -> None:
        super().__init__(("127.0.0.1", 0), _ChatHandler)
        self.script = script
        self.requests: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def next_reply(self, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(request)
        # Replies past the script (qwen's own background calls) get the last one again.
        return self.script[min(len(self.requests) - 1, len(self.script) - 1)]


class _ChatHandler(BaseHTTPRequestHandler):
    server: ScriptedChat

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._send("application/json", {"object": "list", "data": [{"id": "test-model"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        body["authorization"] = self.headers.get("Authorization")
        reply = self.server.next_reply(body)
        usage = {"prompt_tokens": reply["in"], "completion_tokens": reply["out"]}
        usage["total_tokens"] = reply["in"] + reply["out"]
        calls = []
        if "tool" in reply:
            function = {"name": reply["tool"], "arguments": json.dumps(reply["args"])}
            calls = [{"index": 0, "id": reply["id"], "type": "function", "function": function}]
        finish = "tool_calls" if calls else "stop"
        if not body.get("stream"):
            message = {"role": "assistant", "content": reply.get("text", "")}
            if calls:
                message["tool_calls"] = calls
            choice = {"index": 0, "message": message, "finish_reason": finish}
            self._send(
                "application/json",
                {"object": "chat.completion", "choices": [choice], "usage": usage},
            )
            return
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": reply.get("text", "")}]
        if calls:
            deltas.append({"tool_calls": calls})
        chunks = [{"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
        chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        chunks.append({"choices": [], "usage": usage})
        stream = "".join(
            "data: "
            + json.dumps({"object": "chat.completion.chunk", "model": "test-model", **c})
            + "\n\n"
            for c in chunks
        )
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write((stream + "data: [DONE]\n\n").encode())

    def _send(self, kind: str, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def run_agent(
    adapter: AgentAdapter, prompt: str, cwd: Path, resume: Resume | None = None
) -> list[AgentEvent]:
    inv = adapter.invocation(prompt, resume)
    assert inv.home is not None
    inv.home.mkdir(parents=True, exist_ok=True)
    executable = find_qwen()
    assert executable
    env = {"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8", "HOME": str(inv.home), **inv.env}
    proc = subprocess.run(
        [executable, *inv.argv[1:]],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return parse_all(adapter, proc.stdout.splitlines())


@pytest.mark.skipif(find_qwen() is None, reason="the qwen CLI is not installed")
def test_real_qwen_session_tool_call_usage_and_resume(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    target = work / "fix.txt"
    script = [
        {
            "text": "Writing the fix.",
            "tool": "write_file",
            "id": "call_write_1",
            "args": {"file_path": str(target), "content": "fixed\n"},
            "in": 1000,
            "out": 20,
        },
        {"text": "Wrote fix.txt. Should I also add a test for it?", "in": 1100, "out": 12},
        {"text": "Added nothing else; the fix is complete.", "in": 1200, "out": 9},
    ]
    with ScriptedChat(script) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            profile = AgentProfile(adapter="qwen", model="test-model", base_url=server.url)
            adapter = adapter_class("qwen")(profile, private_home=tmp_path / "home", environ={})
            first = run_agent(adapter, "Write fix.txt", work)
            session = [event.session_id for event in first if event.type == "session"]
            assert len(session) == 1 and session[0]
            assert target.read_text() == "fixed\n"
            calls = [event for event in first if event.type == "tool_call"]
            results = [event for event in first if event.type == "tool_result"]
            assert [(c.tool, c.call_id) for c in calls] == [("write_file", "call_write_1")]
            assert [r.call_id for r in results] == ["call_write_1"] and not results[0].is_error
            assert ended_on_question(final_text(first))
            assert sum(event.input_tokens for event in first if event.type == "usage") >= 2100
            assert server.requests[0]["model"] == "test-model"
            assert server.requests[0]["authorization"].startswith("Bearer ")

            second = run_agent(adapter, "", work, Resume(session_id=session[0], message="Go on."))
            assert [event.session_id for event in second if event.type == "session"] == session
            assert final_text(second) == "Added nothing else; the fix is complete."
        finally:
            server.shutdown()


# --- codex and opencode: lines recorded from the real CLIs (see tests/data/streams/README.md) --

REAL = {"codex.real": "codex", "opencode.real": "opencode"}
REAL_FINAL = "Done: the shell said hello and hello.txt is written."
EXPECTED.update(
    {
        "codex.real": {
            "session": "01a22668-a85e-7c70-bd81-6b6fe8f68222",
            "final": REAL_FINAL,
            "usage": (2400, 60, 0.0),  # two model calls of 1200 in, 30 out
        },
        "opencode.real": {
            "session": "ses_dd9958231ffeJqviD6SsMbQDbX",
            "final": REAL_FINAL,
            "usage": (3 * 1200, 3 * 30, 0.0),
        },
    }
)


@pytest.mark.parametrize(
    "stream",
    [*sorted(REAL), "codex-resume.real", "codex-noroute.real", "codex-nudged.real"]
    + ["codex-401.real"]
    + ["opencode-resume.real", "opencode-denied.real", "opencode-error.real"],
)
def test_real_recordings_keep_every_line(stream: str) -> None:
    adapter = make(stream.split(".")[0].split("-")[0])
    lines = stream_lines(stream)
    for line in lines[:-1]:
        assert adapter.parse_line(line), f"{stream} dropped the line {line[:80]!r}"
    assert [(e.type, e.text) for e in adapter.parse_line(lines[-1])] == [("raw", GARBAGE)]


def test_real_codex_warnings_are_not_errors() -> None:
    # Every run on a model codex has no metadata for starts with such a warning item.
    events = parse_all(make("codex"), stream_lines("codex.real"))
    assert "Model metadata for `test-model` not found" in stream_lines("codex.real")[1]
    assert [event for event in events if event.type == "error"] == []


def test_real_codex_without_a_responses_route_fails_after_its_retries() -> None:
    events = parse_all(make("codex"), stream_lines("codex-noroute.real"))
    errors = {event.text for event in events if event.type == "error"}
    assert errors == {
        "unexpected status 404 Not Found: no route for POST /v1/responses, "
        "url: http://127.0.0.1:18431/v1/responses"
    }  # the five "Reconnecting... n/5" notices before it are not errors
    finals = [event for event in events if event.type == "final"]
    assert len(finals) == 1 and finals[0].is_error


def test_real_codex_refused_key_is_a_login_error_after_its_retries() -> None:
    # Recorded through loopd: the provider answered 401 invalid_api_key to every request.
    events = parse_all(make("codex"), stream_lines("codex-401.real"))
    errors = [event for event in events if event.type == "error"]
    assert len(errors) == 2 and all(event.login for event in errors)  # `error`, `turn.failed`
    assert errors[0].text.startswith("unexpected status 401 Unauthorized: Incorrect API key")
    retries = [event.text for event in events if event.type == "raw" and "/5" in event.text]
    assert [text[:24] for text in retries] == [f"codex: Reconnecting... {n}" for n in range(1, 6)]
    finals = [event for event in events if event.type == "final"]
    assert len(finals) == 1 and finals[0].is_error
    # Not a refused login: an endpoint without the route, a usage limit.
    assert not any(e.login for e in parse_all(make("codex"), stream_lines("codex-noroute.real")))


def test_real_codex_nudged_thread_counts_only_the_new_calls() -> None:
    # The first session, then the same thread resumed by loopd's nudge (recorded through loopd).
    adapter = make("codex")
    first = parse_all(adapter, stream_lines("codex"))
    second = parse_all(adapter, stream_lines("codex-nudged.real"))
    assert {e.session_id for e in first + second if e.type == "session"} == {
        EXPECTED["codex"]["session"]
    }
    assert [(e.input_tokens, e.output_tokens) for e in second if e.type == "usage"] == [(2400, 60)]
    assert final_text(second) == "Fixed add() in calc.py: it returns a + b now."
    assert [e.tool for e in second if e.type == "tool_call"] == ["file_change"]


def test_real_codex_notices_read_as_words() -> None:
    # The model-metadata warning, the turn's start and the retries are notes, not JSON lines.
    events = parse_all(make("codex"), stream_lines("codex-401.real"))
    notes = [event.text for event in events if event.type == "raw"]
    assert notes[0] == (
        "codex: no metadata for model `gpt-test-codex` in its catalogue; it goes on with "
        "default metadata (usual for a local model)"
    )
    assert notes[1] == "codex: turn started"
    assert not any(text.startswith("{") for text in notes[:-1])


def test_real_codex_resume_reports_only_the_new_turn() -> None:
    # turn.completed carries the thread's running total: 4800 after the resumed turn.
    adapter = make("codex")
    first = parse_all(adapter, stream_lines("codex.real"))
    second = parse_all(adapter, stream_lines("codex-resume.real"))
    sessions = {event.session_id for event in first + second if event.type == "session"}
    assert sessions == {EXPECTED["codex.real"]["session"]}
    usage = [(e.input_tokens, e.output_tokens) for e in second if e.type == "usage"]
    assert usage == [(2400, 60)]
    assert final_text(second) == REAL_FINAL
    fresh = parse_all(make("codex"), stream_lines("codex-resume.real"))
    assert [e.input_tokens for e in fresh if e.type == "usage"] == [4800]  # earlier turns again


def test_real_opencode_resume_keeps_the_session() -> None:
    events = parse_all(make("opencode"), stream_lines("opencode-resume.real"))
    assert {e.session_id for e in events if e.type == "session"} == {
        EXPECTED["opencode.real"]["session"]
    }
    assert final_text(events) == REAL_FINAL


def test_real_opencode_denied_edit_is_marked() -> None:
    # permission.edit = "ask": opencode run rejects the request itself and the session ends.
    events = parse_all(make("opencode"), stream_lines("opencode-denied.real"))
    denied = [event for event in events if event.type == "tool_result" and event.denied]
    assert [(event.tool, event.is_error) for event in denied] == [("write", True)]
    assert permission_denied(events)
    assert not permission_denied(parse_all(make("opencode"), stream_lines("opencode.real")))
    assert [event for event in events if event.type == "final"] == []


def test_real_opencode_endpoint_error_is_an_error() -> None:
    events = parse_all(make("opencode"), stream_lines("opencode-error.real"))
    assert [event.text for event in events if event.type == "error"] == ["Not Found"]


def test_opencode_names_new_sessions_itself() -> None:
    adapter = make("opencode", model="m", base_url=LOCAL)
    first = adapter.invocation(PROMPT).argv
    assert first[first.index("--title") + 1] == "loopd"
    assert "--title" not in adapter.invocation(PROMPT, Resume(SID, NUDGE)).argv


# --- the real opencode CLI against the scripted OpenAI-compatible server ----------------------


def find_opencode() -> str | None:
    for candidate in (
        os.environ.get("LOOPD_TEST_OPENCODE", ""),
        str(Path(__file__).resolve().parent.parent / "node_modules" / ".bin" / "opencode"),
        shutil.which("opencode") or "",
    ):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def opencode_reply(body: dict[str, Any]) -> Any:
    """bash, then write, then text: counted by the tool results since the last user message."""
    messages = body.get("messages") or []
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
    done = sum(1 for m in messages[last_user:] if m.get("role") == "tool")
    usage = {"prompt_tokens": 1200, "completion_tokens": 30}
    if not body.get("tools"):  # a session title, should opencode ask for one
        return {"text": "A title", "usage": usage}
    if done == 0:
        arguments = {"command": "echo hello", "description": "Print hello"}
        return {"tool_calls": [{"name": "bash", "arguments": arguments}], "usage": usage}
    if done == 1:
        arguments = {"filePath": "hello.txt", "content": "hello\n"}
        return {"tool_calls": [{"name": "write", "arguments": arguments}], "usage": usage}
    return {"text": REAL_FINAL, "usage": usage}


def run_opencode(adapter: AgentAdapter, cwd: Path, resume: Resume | None = None) -> list[str]:
    inv = adapter.invocation("Say hello in the shell, then write hello.txt.", resume)
    assert inv.home is not None
    inv.home.mkdir(parents=True, exist_ok=True)
    executable = find_opencode()
    assert executable
    env = {"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8", "HOME": str(inv.home), **inv.env}
    proc = subprocess.run(
        [executable, *inv.argv[1:]],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.splitlines()


@pytest.mark.skipif(find_opencode() is None, reason="the opencode CLI is not installed")
def test_real_opencode_session_tool_calls_usage_and_resume(tmp_path: Path) -> None:
    from tests.model_server import ScriptedModelServer

    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    with ScriptedModelServer() as server:
        server.script(opencode_reply)
        profile = AgentProfile(adapter="opencode", model="test-model", base_url=server.base_url)
        adapter = adapter_class("opencode")(profile, private_home=tmp_path / "home", environ={})
        first = parse_all(adapter, run_opencode(adapter, work))
        assert (work / "hello.txt").read_text() == "hello\n"
        assert [(e.type, e.tool) for e in first if e.type.startswith("tool_")] == [
            ("tool_call", "bash"),
            ("tool_result", "bash"),
            ("tool_call", "write"),
            ("tool_result", "write"),
        ]
        assert final_text(first) == REAL_FINAL
        assert sum(e.input_tokens for e in first if e.type == "usage") == 3 * 1200
        requests = server.chat_requests()
        assert len(requests) == 3 and all(body["tools"] for body in requests)  # no title call
        assert requests[0]["model"] == "test-model"

        session = [e.session_id for e in first if e.type == "session"]
        assert len(session) == 1
        second = parse_all(adapter, run_opencode(adapter, work, Resume(session[0], "Go on.")))
        assert [e.session_id for e in second if e.type == "session"] == session
        assert final_text(second) == REAL_FINAL
        assert len(server.chat_requests()) == 6


def test_aider_keeps_its_chat_history_in_the_scratch_folder_outside_the_tree(
    tmp_path: Path,
) -> None:
    adapter = adapter_class("aider")(AgentProfile(adapter="aider", model="gpt-4o"), None)
    adapter.scratch = tmp_path / "scratch"
    argv = adapter.invocation("fix it").argv
    history = argv[argv.index("--chat-history-file") + 1]
    assert history == str(tmp_path / "scratch" / ".aider.chat.history.md")
    resumed = adapter.invocation("go on", Resume("", "go on")).argv
    assert "--restore-chat-history" in resumed
    assert resumed[resumed.index("--chat-history-file") + 1] == history


def test_without_the_mcp_extra_claude_gets_no_mcp_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    access = DeskAccess([sys.executable, "-m", "daemon.cli.main", "mcp"], {"T": "1"}, None)
    adapter = adapter_class("claude")(AgentProfile(adapter="claude"), private_home=home, environ={})
    adapter.desk = access
    adapter.write_tool_config(home)
    assert (home / adapter_class("claude").MCP_FILE).is_file()
    assert "--mcp-config" in adapter.invocation("x").argv

    class NoMcp:
        """A finder that says the `mcp` package is not installed, as on an install without
        the extra."""

        def find_spec(self, name: str, *args: Any) -> None:
            if name == "mcp" or name.startswith("mcp."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    for name in [m for m in sys.modules if m == "mcp" or m.startswith("mcp.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [NoMcp(), *sys.meta_path])
    bare = tmp_path / "bare"
    bare.mkdir()
    adapter = adapter_class("claude")(AgentProfile(adapter="claude"), private_home=bare, environ={})
    adapter.desk = access
    adapter.write_tool_config(bare)
    assert list(bare.iterdir()) == []
    assert "--mcp-config" not in adapter.invocation("x").argv


# --- aider: lines recorded from the real aider 0.86.2 (see tests/data/streams/README.md) -----


def aider_events(name: str) -> tuple[AgentAdapter, list[AgentEvent]]:
    adapter = make("aider")
    return adapter, parse_all(adapter, (STREAMS / name).read_text().splitlines())


def test_aider_summary_is_the_models_answer_not_its_last_line() -> None:
    _, events = aider_events("aider.txt")
    assert [e.text for e in events if e.type == "text"][-2] == "Applied edit to hello.txt"
    (final,) = [e for e in events if e.type == "final"]
    # The file name aider printed when it added the file the message named is not the answer.
    assert final.text.startswith("I will change hello.txt.")
    assert final_text(events).endswith("hello.txt now says hello, world.")
    _, resumed = aider_events("aider-resume.txt")
    assert final_text(resumed) == "Checked again: the greeting is hello, world. Nothing else to do."


def test_aider_refused_key_is_a_login_error_and_the_summary_says_so() -> None:
    _, events = aider_events("aider-401.txt")
    (error,) = [e for e in events if e.type == "error"]
    assert error.login and not error.quota
    assert error.text.startswith("litellm.AuthenticationError: ")
    # aider's last line is the URL it offered; the summary is the error.
    assert [e.text for e in events if e.type == "text" and e.text][-1].startswith("https://")
    assert final_text(events) == error.text


def test_aider_rate_limit_is_a_usage_limit_once_its_retries_reach_the_cap() -> None:
    adapter = make("aider")
    lines = (ROOT_DATA / "quota" / "aider-quota.txt").read_text().splitlines()
    flagged = []
    for line in lines:
        events = adapter.parse_line(line)
        if any(e.type == "error" and e.quota for e in events):
            flagged.append(line)
    assert flagged and flagged[0] == "Retrying in 2.0 seconds..."
    errors = parse_all(make("aider"), lines)
    limit = next(e for e in errors if e.quota)
    assert limit.text.startswith("litellm.RateLimitError: ")
    assert "You exceeded your current quota" in limit.text  # the provider's body


def test_aider_is_started_quiet_and_offline(tmp_path: Path) -> None:
    adapter = make("aider", tmp_path, model="test-model", base_url="http://127.0.0.1:9/v1")
    invocation = adapter.invocation("fix it")
    for flag in (
        "--no-check-update",
        "--no-analytics",
        "--no-show-release-notes",
        "--no-show-model-warnings",
        "--no-pretty",
    ):
        assert flag in invocation.argv
    assert invocation.env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert invocation.env["PYTHONUNBUFFERED"] == "1"  # print() reaches loopd as it happens
    home = tmp_path / "agent-home"
    # aider downloads litellm's price list when ~/.aider/caches has none: the run's HOME has one.
    cache = home / ".aider" / "caches" / "model_prices_and_context_window.json"
    assert json.loads(cache.read_text())
    assert "max_retries: 0" in (home / ".aider.model.settings.yml").read_text()
    # Without a run's HOME nothing is written into the person's own.
    bare = make("aider", None, model="gpt-4o")
    assert bare.invocation("fix it").home is None
