"""The `gemini` adapter (Gemini CLI, `--output-format stream-json`).

What Gemini CLI 0.61.0 does, read from its bundle and seen against a scripted Gemini API:
- Headless it takes its login method from `security.auth.selectedType` in
  `~/.gemini/settings.json`, else from the environment, where `GOOGLE_GEMINI_BASE_URL` comes
  before `GEMINI_API_KEY` and picks the `gateway` method, which headless mode refuses
  ("Invalid auth method selected.", exit 41, no JSON line). A profile with a key or a
  `base_url` therefore gets `gemini-api-key` selected in the run's settings.json; the API-key
  method still reads `GOOGLE_GEMINI_BASE_URL`.
- A failed API call ends the stream with a `result` whose `error.type` is "unknown" (the error
  reaches the formatter as a plain object) and whose message is `[API Error: ...]`: for a 429,
  the quota's words (with "Please retry in Ns." and, past 300 s, "Suggested retry after Ns.",
  which gemini does not wait for itself) and a suffix that Gemini CLI adds for status 429 only;
  for a 401, a 403 or a refused key, the API's own error body as JSON. The exit code is the
  HTTP status modulo 256.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from daemon.agents.base import (
    AgentAdapter,
    AgentEvent,
    Invocation,
    Resume,
    as_int,
    as_list,
    as_object,
    as_text,
    is_denial,
    positional,
    raw,
)
from daemon.agents.claude import PLACEHOLDER_KEY
from daemon.agents.deskconfig import merge_settings, update_settings

# The login method that honours an API key and GOOGLE_GEMINI_BASE_URL headless.
API_KEY_AUTH = "gemini-api-key"
# What Gemini CLI appends to an API error's text exactly when its status is 429, per login
# method (packages/core/src/utils/errorParsing.ts): API key, Vertex AI, and the others.
_RATE_LIMIT_SUFFIX = re.compile(
    r"\]\n(?:Please wait and try again later\. To increase your limits"
    r"|Possible quota limitations in place or slow response times detected)"
)
_QUOTA_TYPES = ("TerminalQuotaError", "RetryableQuotaError")
_QUOTED_CHARS = 20_000  # where in an error's message its quoted API error is looked for
_QUOTED_TRIES = 20  # how many `{` of it are tried as the start of one
# The API's statuses and reasons for credentials it does not take.
_LOGIN_STATUSES = ("UNAUTHENTICATED", "PERMISSION_DENIED")
_LOGIN_REASONS = ("API_KEY_INVALID", "ACCESS_TOKEN_EXPIRED", "ACCESS_TOKEN_TYPE_UNSUPPORTED")


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
        """`loopd mcp` and what a run needs of Gemini CLI's settings, merged into the copied
        settings.json (the person's keys kept): the login method that takes the profile's key
        and endpoint, no update check (the installation is read-only in the sandbox), and no
        sandbox of its own (`tools.sandbox`: docker or podman cannot nest inside loopd's)."""
        self._write_settings(home)
        if self.desk is not None:
            merge_settings(home / ".gemini" / "settings.json", self.desk)

    def _write_settings(self, home: Path) -> None:
        """The settings a run needs (see `write_tool_config`), without the tools: written at
        every start too, so a start without a desk (`loopd check`'s login try) has them."""
        changes: dict[str, Any] = {
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "tools": {"sandbox": False},
        }
        if self.profile.base_url or self.profile.api_key_env:
            changes["security"] = {"auth": {"selectedType": API_KEY_AUTH}}
        update_settings(home / ".gemini" / "settings.json", changes)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._answer: list[str] = []
        self._tools: dict[str, str] = {}  # tool_id -> tool_name: a result names only the id

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
        # The API-key login refuses to start without a key, even for a keyless local server.
        key = self.api_key()
        if key:
            env["GEMINI_API_KEY"] = key
        elif self.profile.base_url:
            env["GEMINI_API_KEY"] = PLACEHOLDER_KEY
        home = self.home()
        if home is not None:
            self._write_settings(home)
        return Invocation(argv=argv, env=env, home=home)

    def parse_line(self, line: str) -> list[AgentEvent]:
        data = self.loads(line)
        if data is None:
            return raw(line)
        kind = data.get("type")
        if kind == "init" and isinstance(data.get("session_id"), str) and data["session_id"]:
            self._answer = []
            return [AgentEvent(type="session", session_id=data["session_id"])]
        if kind == "message" and data.get("role") == "user":
            # Gemini CLI echoes what it was asked: loopd's prompt or nudge, kept as such.
            return [AgentEvent(type="prompt", text=as_text(data.get("content")))]
        if kind == "message" and data.get("role") == "assistant":
            text = as_text(data.get("content"))
            if not data.get("delta"):
                self._answer = []  # a whole message replaces what the chunks said
            self._answer.append(text)
            delta = data.get("delta") is True
            return [AgentEvent(type="text", text=text, delta=delta)] if text else raw(line)
        if kind == "tool_use":
            self._answer = []
            call_id, tool = str(data.get("tool_id") or ""), str(data.get("tool_name") or "")
            if len(self._tools) < 10_000:
                self._tools[call_id] = tool
            return [
                AgentEvent(
                    type="tool_call", tool=tool, call_id=call_id, arguments=data.get("parameters")
                )
            ]
        if kind == "tool_result":
            result = _tool_result(data)
            result.tool = self._tools.get(result.call_id, "")
            return [result]
        if kind == "error":
            return [AgentEvent(type="error", text=as_text(data.get("message")) or line)]
        if kind == "result":
            return self._result(data)
        return raw(line)

    def _result(self, data: dict[str, Any]) -> list[AgentEvent]:
        stats = as_object(data.get("stats"))
        failed = data.get("status") == "error"
        events = [
            AgentEvent(
                type="usage",
                input_tokens=as_int(stats.get("input_tokens")),
                output_tokens=as_int(stats.get("output_tokens")),
            )
        ]
        if failed:
            error = as_object(data.get("error"))
            kind = str(error.get("type") or "")
            text = as_text(error.get("message")) or "error"
            api = _api_error(text)
            events.append(
                AgentEvent(
                    type="error", text=text, quota=_is_quota(kind, text, api), login=_is_login(api)
                )
            )
        events.append(AgentEvent(type="final", text="".join(self._answer).strip(), is_error=failed))
        return events


def _tool_result(data: dict[str, Any]) -> AgentEvent:
    failed = data.get("status") == "error"
    error = as_object(data.get("error"))
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


def _api_error(text: str) -> dict[str, Any]:
    """The API's error object quoted in Gemini CLI's message (`[API Error: {"error": ...}]`),
    or an empty dict when the message quotes none."""
    text = text[:_QUOTED_CHARS]  # the agent's output is untrusted: bounded work per line
    start = text.find("{")
    for _ in range(_QUOTED_TRIES):
        if start == -1:
            break
        try:
            value, _end = json.JSONDecoder().raw_decode(text, start)
        except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
            value = None
        if isinstance(value, dict) and isinstance(value.get("error"), dict):
            return value["error"]
        start = text.find("{", start + 1)
    return {}


def _is_quota(kind: str, text: str, api: dict[str, Any]) -> bool:
    """A usage limit, by structure: gemini's quota error classes, the suffix it adds for a 429
    only, or a quoted error with status 429 / RESOURCE_EXHAUSTED. Never by the word "quota"."""
    if kind in _QUOTA_TYPES or _RATE_LIMIT_SUFFIX.search(text):
        return True
    return api.get("code") == 429 or api.get("status") == "RESOURCE_EXHAUSTED"


def _is_login(api: dict[str, Any]) -> bool:
    """Credentials refused, by the quoted API error: 401, 403, or a key the API rejects."""
    if api.get("code") in (401, 403) or api.get("status") in _LOGIN_STATUSES:
        return True
    details = as_list(api.get("details"))
    reasons = {str(d.get("reason")) for d in details if isinstance(d, dict)}
    return bool(reasons & set(_LOGIN_REASONS))
