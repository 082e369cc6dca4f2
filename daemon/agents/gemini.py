"""The `gemini` adapter (Gemini CLI, `--output-format stream-json`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.agents.base import (
    AgentAdapter,
    AgentEvent,
    Invocation,
    Resume,
    as_int,
    as_text,
    is_denial,
    positional,
    raw,
)
from daemon.agents.deskconfig import merge_settings


class GeminiAdapter(AgentAdapter):
    """Gemini CLI's JSONL events (init, message, tool_use, tool_result, error, result).

    Stateful, because the format needs it: assistant text arrives as `message` chunks
    (`delta: true`) and `result` carries only statistics, so the final answer is the assistant
    text gathered since the last tool call, handed out when `result` arrives.
    """

    name = "gemini"
    structured_stream = True
    session_resume = True
    usage = True
    tool_calls = True
    # settings.json names the login method: without it a headless Gemini CLI picks none.
    login_files = (
        ".gemini/oauth_creds.json",
        ".gemini/google_accounts.json",
        ".gemini/settings.json",
    )
    credential_files = (".gemini/oauth_creds.json",)
    config_paths = (".gemini/",)
    speaks_mcp = True

    def write_tool_config(self, home: Path) -> None:
        if self.desk is not None:  # merged into the copied settings.json, which keeps its login
            merge_settings(home / ".gemini" / "settings.json", self.desk)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._answer: list[str] = []

    def invocation(self, prompt: str, resume: Resume | None = None) -> Invocation:
        argv = ["gemini"]
        if resume:
            argv += ["--resume", resume.session_id]
        argv += ["-p", positional(resume.message if resume else prompt)]
        argv += ["--output-format", "stream-json", "--yolo"]
        if self.profile.model:
            argv += ["-m", self.profile.model]
        argv += list(self.profile.args)
        env: dict[str, str] = {}  # the profile's env is added by the caller
        # Headless in a folder the user never trusted, Gemini CLI falls back to asking for
        # approval, which nobody answers; the run's worktree is trusted by construction.
        env["GEMINI_CLI_TRUST_WORKSPACE"] = "true"
        # Gemini CLI speaks the Gemini API; its base URL is a Gemini-compatible endpoint.
        if self.profile.base_url:
            env["GOOGLE_GEMINI_BASE_URL"] = self.profile.base_url
        key = self.api_key()
        if key:
            env["GEMINI_API_KEY"] = key
        return Invocation(argv=argv, env=env, home=self.home())

    def parse_line(self, line: str) -> list[AgentEvent]:
        data = self.loads(line)
        if data is None:
            return raw(line)
        kind = data.get("type")
        if kind == "init" and isinstance(data.get("session_id"), str) and data["session_id"]:
            self._answer = []
            return [AgentEvent(type="session", session_id=data["session_id"])]
        if kind == "message" and data.get("role") == "assistant":
            text = as_text(data.get("content"))
            if not data.get("delta"):
                self._answer = []  # a whole message replaces what the chunks said
            self._answer.append(text)
            return [AgentEvent(type="text", text=text)] if text else raw(line)
        if kind == "tool_use":
            self._answer = []
            return [
                AgentEvent(
                    type="tool_call",
                    tool=str(data.get("tool_name") or ""),
                    call_id=str(data.get("tool_id") or ""),
                    arguments=data.get("parameters"),
                )
            ]
        if kind == "tool_result":
            return [_tool_result(data)]
        if kind == "error":
            return [AgentEvent(type="error", text=as_text(data.get("message")) or line)]
        if kind == "result":
            return self._result(data)
        return raw(line)

    def _result(self, data: dict[str, Any]) -> list[AgentEvent]:
        stats = data.get("stats") if isinstance(data.get("stats"), dict) else {}
        failed = data.get("status") == "error"
        events = [
            AgentEvent(
                type="usage",
                input_tokens=as_int(stats.get("input_tokens")),
                output_tokens=as_int(stats.get("output_tokens")),
            )
        ]
        if failed:
            error = data.get("error") if isinstance(data.get("error"), dict) else {}
            # TerminalQuotaError: a daily or long quota, which Gemini CLI does not retry.
            quota = "quota" in str(error.get("type") or "").lower()
            text = as_text(error.get("message")) or "error"
            events.append(AgentEvent(type="error", text=text, quota=quota))
        events.append(AgentEvent(type="final", text="".join(self._answer).strip(), is_error=failed))
        return events


def _tool_result(data: dict[str, Any]) -> AgentEvent:
    failed = data.get("status") == "error"
    error = data.get("error") if isinstance(data.get("error"), dict) else {}
    output = as_text(data.get("output"))
    if failed and not output:
        output = as_text(error.get("message"))
    return AgentEvent(
        type="tool_result",
        call_id=str(data.get("tool_id") or ""),
        output=output,
        is_error=failed,
        denied=failed and is_denial(f"{error.get('type', '')} {output}"),
    )
