"""The `claude` adapter (Claude Code), and the stream-json format it shares with Qwen Code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.agents.base import (
    AgentAdapter,
    AgentEvent,
    Invocation,
    Resume,
    as_float,
    as_int,
    as_object,
    as_text,
    is_denial,
    positional,
    raw,
)
from daemon.agents.deskconfig import claude_config, mcp_installed

# What a keyless local endpoint gets: the CLI refuses to start without some key.
PLACEHOLDER_KEY = "loopd-no-key"
# Claude Code retries a failed request 10 times by default, for minutes: a refused key would
# hold the run that long. loopd nudges and parks by itself, so a few retries are enough.
MAX_RETRIES = "2"
# The `error` of Claude Code's synthetic assistant line (and `api_error_status`) that say a
# usage limit, and a refused login.
QUOTA_ERRORS = frozenset({"rate_limit"})
LOGIN_ERRORS = frozenset({"authentication_failed", "oauth_org_not_allowed"})


def parse_stream_json(line: str, *, cache_is_extra: bool) -> list[AgentEvent]:
    """Normalize one line of Claude Code's stream-json output (Qwen Code writes the same).

    Lines: `system` (subtype `init` carries `session_id`), `assistant` (content blocks `text` and
    `tool_use`), `user` (content blocks `tool_result`), `result` (the final text in `result`, the
    session's `usage`, `total_cost_usd`, `is_error`). Usage is taken from `result` only: assistant
    lines repeat a message's usage once per content block, so summing them would count twice.
    `cache_is_extra`: Claude counts cache reads and writes apart from `input_tokens`; Qwen's
    `input_tokens` already include them.
    """
    data = AgentAdapter.loads(line)
    if data is None:
        return raw(line)
    kind = data.get("type")
    if kind == "system":
        session = data.get("session_id")
        if data.get("subtype") == "init" and isinstance(session, str) and session:
            return [AgentEvent(type="session", session_id=session)]
        if data.get("subtype") == "api_retry":
            return [_retry_notice(data)]
        return raw(line)
    if kind == "assistant":
        return _assistant(data) or raw(line)
    if kind == "user":
        return _tool_results(data) or raw(line)
    if kind == "result":
        return _result(data, cache_is_extra=cache_is_extra)
    if kind == "rate_limit_event":
        return _rate_limit(data) or raw(line)
    return raw(line)


def _rate_limit(data: dict[str, Any]) -> list[AgentEvent]:
    """Claude Code's subscription limit: a `rejected` status ends the session (others are
    notices sent on every turn); `resetsAt` is when it lifts, in epoch seconds."""
    info = data.get("rate_limit_info")
    if not isinstance(info, dict) or info.get("status") != "rejected":
        return []
    kind = str(info.get("rateLimitType") or "usage")
    return [
        AgentEvent(
            type="error",
            text=f"usage limit reached ({kind})",
            quota=True,
            reset_at=as_float(info.get("resetsAt")),
        )
    ]


def _retry_notice(data: dict[str, Any]) -> AgentEvent:
    """A request Claude Code will send again (`system/api_retry`): a notice, not an error:
    the session goes on, and its ending says whether the retries helped."""
    status = as_int(data.get("error_status"))
    why = str(data.get("error") or "") or (f"HTTP {status}" if status else "an error")
    delay = as_float(data.get("retry_delay_ms")) / 1000
    text = f"API request failed ({why}"
    text += f", HTTP {status})" if status and why != f"HTTP {status}" else ")"
    text += f"; retry {as_int(data.get('attempt'))} of {as_int(data.get('max_retries'))}"
    text += f" in {delay:.1f}s" if delay else ""
    return AgentEvent(type="notice", text=text)


def api_error(data: dict[str, Any], text: str) -> AgentEvent | None:
    """The error event of a line that carries Claude Code's API error (its synthetic assistant
    line, its `result`), marked a usage limit or a refused login by its structure; None when
    the line carries none."""
    status = as_int(data.get("api_error_status"))
    kind = data.get("error") if isinstance(data.get("error"), str) else ""
    if not status and not kind:
        return None
    quota = status == 429 or kind in QUOTA_ERRORS
    login = status in (401, 403) or kind in LOGIN_ERRORS
    return AgentEvent(type="error", text=text or kind or f"HTTP {status}", quota=quota, login=login)


def _blocks(data: dict[str, Any]) -> list[dict[str, Any]]:
    message = data.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    return [block for block in content if isinstance(block, dict)]


def _assistant(data: dict[str, Any]) -> list[AgentEvent]:
    if data.get("is_api_error_message") or isinstance(data.get("error"), str):
        # Claude Code's own line, not the model's words: the error its API call ended on.
        text = "\n".join(as_text(b.get("text")) for b in _blocks(data) if b.get("type") == "text")
        event = api_error(data, text)
        if event is not None:
            return [event]
    events = []
    for block in _blocks(data):
        if block.get("type") == "text" and isinstance(block.get("text"), str) and block["text"]:
            events.append(AgentEvent(type="text", text=block["text"]))
        elif block.get("type") == "tool_use":
            events.append(
                AgentEvent(
                    type="tool_call",
                    tool=str(block.get("name") or ""),
                    call_id=str(block.get("id") or ""),
                    arguments=block.get("input"),
                )
            )
    return events


def _tool_results(data: dict[str, Any]) -> list[AgentEvent]:
    events = []
    for block in _blocks(data):
        if block.get("type") != "tool_result":
            continue
        output = as_text(block.get("content"))
        failed = bool(block.get("is_error"))
        events.append(
            AgentEvent(
                type="tool_result",
                call_id=str(block.get("tool_use_id") or ""),
                output=output,
                is_error=failed,
                denied=failed and is_denial(output),
            )
        )
    return events


def _result(data: dict[str, Any], *, cache_is_extra: bool) -> list[AgentEvent]:
    usage = as_object(data.get("usage"))
    input_tokens = as_int(usage.get("input_tokens"))
    if cache_is_extra:
        input_tokens += as_int(usage.get("cache_creation_input_tokens"))
        input_tokens += as_int(usage.get("cache_read_input_tokens"))
    failed = bool(data.get("is_error")) or str(data.get("subtype", "")).startswith("error")
    events = [
        AgentEvent(
            type="usage",
            input_tokens=input_tokens,
            output_tokens=as_int(usage.get("output_tokens")),
            cost_usd=as_float(data.get("total_cost_usd")),
        )
    ]
    text = data.get("result") if isinstance(data.get("result"), str) else ""
    if failed:
        message = _error_message(data) or text or str(data.get("subtype") or "error")
        events.append(api_error(data, message) or AgentEvent(type="error", text=message))
    events.append(AgentEvent(type="final", text=text, is_error=failed))
    return events


def _error_message(data: dict[str, Any]) -> str:
    error = data.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    errors = data.get("errors")
    if isinstance(errors, list):
        return "; ".join(as_text(item) for item in errors)
    return ""


class ClaudeAdapter(AgentAdapter):
    """Claude Code in print mode with a stream-json output; resumes a session by id."""

    name = "claude"
    structured_stream = True
    session_resume = True
    usage = True
    tool_calls = True
    login_files = (".claude/.credentials.json", ".claude.json")
    credential_files = (".claude/.credentials.json",)
    config_paths = (".claude/", ".claude.json")
    speaks_mcp = True
    MCP_FILE = ".loopd-mcp.json"  # in the run's HOME, given with --mcp-config

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._api_error = ""  # the text of the last API error its synthetic line said

    def write_tool_config(self, home: Path) -> None:
        # Without the MCP SDK `loopd mcp` cannot start, and Claude Code would report the
        # server failed: it gets none, and `loopd-tool` alone.
        if self.desk is not None and mcp_installed():
            claude_config(home / self.MCP_FILE, self.desk)

    def invocation(self, prompt: str, resume: Resume | None = None) -> Invocation:
        text = resume.message if resume else prompt
        argv = ["claude", "-p", positional(text), "--output-format", "stream-json", "--verbose"]
        if resume:
            argv += ["--resume", resume.session_id]
        # Unattended: no tool waits for a person (refused as root unless IS_SANDBOX=1, below).
        argv += ["--permission-mode", "bypassPermissions"]
        home = self.home()
        if self.desk is not None and home is not None and mcp_installed():
            argv += ["--mcp-config", str(home / self.MCP_FILE)]
        if self.profile.model:
            argv += ["--model", self.profile.model]
        argv += list(self.profile.args)
        return Invocation(argv=argv, env=self._env(), home=self.home())

    def _env(self) -> dict[str, str]:
        """What the adapter sets; the profile's env is added by the caller and wins."""
        env: dict[str, str] = {
            # A run's HOME is its own: an update there is lost with it, and slows the start.
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_MAX_RETRIES": MAX_RETRIES,
        }
        if self.sandboxed:
            # Claude Code refuses bypassPermissions as root unless told it runs in a sandbox:
            # loopd's sandbox is one (an agent run unconfined as root stays refused).
            env["IS_SANDBOX"] = "1"
        # Claude Code speaks the Anthropic Messages API, so its base URL is an Anthropic-compatible
        # endpoint (vLLM, llama.cpp server and LiteLLM offer one), not an OpenAI-compatible one.
        if self.profile.base_url:
            env["ANTHROPIC_BASE_URL"] = self.profile.base_url
        key = self.api_key()
        if key:
            env["ANTHROPIC_API_KEY"] = key
        elif self.profile.base_url:
            env["ANTHROPIC_API_KEY"] = PLACEHOLDER_KEY
        return {name: value for name, value in env.items() if name not in self.profile.env}

    def parse_line(self, line: str) -> list[AgentEvent]:
        events = parse_stream_json(line, cache_is_extra=True)
        if len(events) == 1 and events[0].type == "error":  # the synthetic assistant line
            self._api_error = events[0].text
        elif self._api_error and any(e.type == "final" for e in events):
            # The result repeats the error its synthetic line said (the flags are said once
            # already): its final event keeps the words.
            events = [e for e in events if not (e.type == "error" and e.text == self._api_error)]
            self._api_error = ""
        return events
