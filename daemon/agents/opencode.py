"""The `opencode` adapter (`opencode run --format json`)."""

from __future__ import annotations

import json
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
from daemon.agents.deskconfig import SERVER, mcp_installed, opencode_server

# The provider loopd defines in OPENCODE_CONFIG_CONTENT when a profile names its own endpoint.
PROVIDER = "loopd"

# The variable each opencode provider reads its key from (models.dev names), by model prefix.
_KEY_VARS = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
    "google": "GOOGLE_GENERATIVE_AI_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
    "groq": "GROQ_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "mistral": "MISTRAL_API_KEY",
    "xai": "XAI_API_KEY",
}


class OpencodeAdapter(AgentAdapter):
    """opencode's JSON event stream; resumes a session with `--session ID`.

    Stateful, because the format needs it: the final answer is the text of the last step, and
    only the `step_finish` that follows it says (reason other than "tool-calls") that it was the
    last; and every line repeats `sessionID`, which is reported once per process.
    """

    name = "opencode"
    structured_stream = True
    session_resume = True
    usage = True
    tool_calls = True
    login_files = (".local/share/opencode/auth.json",)
    credential_files = (".local/share/opencode/auth.json",)
    config_paths = (".local/share/opencode/", ".config/opencode/", ".local/state/opencode/")
    speaks_mcp = True  # its server goes into the inline config of each invocation

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._session = ""
        self._step_text: list[str] = []

    def invocation(self, prompt: str, resume: Resume | None = None) -> Invocation:
        self._session = ""  # a new process: its stream reports the session once more
        argv = ["opencode", "run", "--format", "json"]
        env: dict[str, str] = {}  # the profile's env is added by the caller
        key = self.api_key()
        # Unattended: these tools never wait for a person (a denied permission would end the
        # step). The inline config is merged over the user's own.
        config: dict[str, Any] = {
            "permission": {"edit": "allow", "bash": "allow", "webfetch": "allow"}
        }
        model = self.profile.model
        if self.profile.base_url:
            options: dict[str, Any] = {"baseURL": self.profile.base_url}
            if key:
                options["apiKey"] = "{env:OPENAI_API_KEY}"
                env["OPENAI_API_KEY"] = key
            config["provider"] = {
                PROVIDER: {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": PROVIDER,
                    "options": options,
                    "models": {model: {"name": model}} if model else {},
                }
            }
            if model:
                model = f"{PROVIDER}/{model}"
        elif key:
            provider = model.split("/", 1)[0] if "/" in model else "openai"
            env[_KEY_VARS.get(provider, f"{provider.upper().replace('-', '_')}_API_KEY")] = key
        if self.desk is not None and mcp_installed():
            config["mcp"] = {SERVER: opencode_server(self.desk)}
        env["OPENCODE_CONFIG_CONTENT"] = json.dumps(config)
        if model:
            argv += ["-m", model]
        argv += list(self.profile.args)
        if resume:
            argv += ["--session", resume.session_id]
        else:
            # A given title spares the model call opencode otherwise makes to name a new session
            # (opencode 1.18): one request less on the endpoint, and none without tools.
            argv += ["--title", "loopd"]
        argv.append(positional(resume.message if resume else prompt))
        return Invocation(argv=argv, env=env, home=self.home())

    def parse_line(self, line: str) -> list[AgentEvent]:
        data = self.loads(line)
        if data is None:
            return raw(line)
        events: list[AgentEvent] = []
        session = data.get("sessionID")
        if isinstance(session, str) and session and session != self._session:
            self._session = session
            events.append(AgentEvent(type="session", session_id=session))
        part = as_object(data.get("part"))
        kind = data.get("type")
        if kind == "step_start":
            self._step_text = []
        elif kind == "text" and isinstance(part.get("text"), str):
            self._step_text.append(part["text"])
            events.append(AgentEvent(type="text", text=part["text"]))
        elif kind == "tool_use":
            events += _tool(part)
        elif kind == "step_finish":
            events += self._step_finish(part)
        elif kind == "error":
            error = data.get("error")
            text = _error_text(error) or line
            quota = _status(error) == 429
            if quota:
                # No clock here: the wait the server asked for goes into the text, read later.
                after = _retry_after(error)
                text = f"HTTP 429: {text}" + (f" (retry-after: {after})" if after else "")
            events.append(AgentEvent(type="error", text=text, quota=quota))
        return events or raw(line)

    def _step_finish(self, part: dict[str, Any]) -> list[AgentEvent]:
        tokens = as_object(part.get("tokens"))
        cache = as_object(tokens.get("cache"))
        # opencode counts cache reads and writes apart from `input`, and reasoning apart from
        # `output`; all of them are tokens the model processed.
        events = [
            AgentEvent(
                type="usage",
                input_tokens=as_int(tokens.get("input"))
                + as_int(cache.get("read"))
                + as_int(cache.get("write")),
                output_tokens=as_int(tokens.get("output")) + as_int(tokens.get("reasoning")),
                cost_usd=as_float(part.get("cost")),
            )
        ]
        if part.get("reason") != "tool-calls":
            events.append(AgentEvent(type="final", text="".join(self._step_text).strip()))
        return events


def _tool(part: dict[str, Any]) -> list[AgentEvent]:
    # opencode writes a tool once it has finished: the call and its result come in one line.
    state = as_object(part.get("state"))
    tool = str(part.get("tool") or "")
    call_id = str(part.get("callID") or part.get("id") or "")
    events = [
        AgentEvent(type="tool_call", tool=tool, call_id=call_id, arguments=state.get("input"))
    ]
    status = state.get("status")
    if status in {"completed", "error"}:
        failed = status == "error"
        output = as_text(state.get("error") if failed else state.get("output"))
        events.append(
            AgentEvent(
                type="tool_result",
                tool=tool,
                call_id=call_id,
                output=output,
                is_error=failed,
                denied=failed and is_denial(output),
            )
        )
    return events


def _status(error: Any) -> int:
    """The HTTP status of an `APIError` (`error.data.statusCode`), else 0."""
    data = error.get("data") if isinstance(error, dict) else None
    return as_int(data.get("statusCode")) if isinstance(data, dict) else 0


def _retry_after(error: Any) -> str:
    data = error.get("data") if isinstance(error, dict) else None
    headers = data.get("responseHeaders") if isinstance(data, dict) else None
    if not isinstance(headers, dict):
        return ""
    for key, value in headers.items():
        if str(key).lower() == "retry-after" and isinstance(value, str | int | float):
            return str(value)
    return ""


def _error_text(error: Any) -> str:
    if not isinstance(error, dict):
        return as_text(error)
    data = error.get("data")
    if isinstance(data, dict) and data.get("message"):
        return as_text(data["message"])
    return as_text(error.get("message") or error.get("name"))
