"""The `codex` adapter (OpenAI Codex CLI, `codex exec --json`)."""

from __future__ import annotations

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
    positional,
    raw,
)
from daemon.agents.deskconfig import codex_config

# The provider loopd defines in the run's config.toml when a profile names its own endpoint.
PROVIDER = "loopd"
# What the run's config.toml always says: no update check, no analytics or feedback upload,
# no OpenTelemetry export (keys checked with `codex exec --strict-config`, Codex CLI 0.171).
QUIET = {
    "check_for_update_on_startup": False,
    "analytics": {"enabled": False},
    "feedback": {"enabled": False},
    "otel": {"exporter": "none"},
}

# Item types that are the agent acting on the world; the rest (messages, reasoning, to-do
# lists) are text or nothing.
_TOOL_ITEMS = {
    "command_execution",
    "file_change",
    "mcp_tool_call",
    "web_search",
    "collab_tool_call",
}

# Codex's notice that it is retrying a dropped model stream ("Reconnecting... 2/5 (...)",
# "Reconnecting... waiting for network (...)"): a top-level `error` line, yet not a failure; a
# retry that runs out ends in `turn.failed`.
_RETRY = re.compile(r"^Reconnecting\.\.\. ")
# How Codex words refused credentials in the error a turn fails on: an API key the provider
# refuses ("unexpected status 401 Unauthorized: ..."; 403 alike) and a ChatGPT login that
# cannot be refreshed ("Your access token could not be refreshed ... Please log out and sign
# in again.", "Run codex login again ...").
_LOGIN = re.compile(
    r"^unexpected status 40[13]\b"
    r"|\b(?:access token|authentication session) could not be refreshed"
    r"|\bplease (?:log out and )?sign in again|\bcodex login again",
    re.IGNORECASE,
)
# The warning item Codex starts every thread with on a model its catalogue lacks (a local
# model): harmless, it goes on with default metadata.
_NO_METADATA = re.compile(r"^Model metadata for `([^`]*)` not found")


class CodexAdapter(AgentAdapter):
    """Codex CLI `exec --json`: JSONL thread, turn and item events; resumes a thread by id.

    Stateful, because the format needs it: the agent's final answer is the last `agent_message`
    item, known to be last only when `turn.completed` arrives; a `file_change` item (or any
    tool item whose start was not seen) appears only as completed, so the call is made up then;
    and `turn.completed` carries the thread's running total (a resumed thread counts its
    earlier turns again), so the usage reported is what was added since this adapter last saw
    that thread. A fresh adapter that resumes a thread reports the earlier turns once more.
    """

    name = "codex"
    structured_stream = True
    session_resume = True
    usage = True
    tool_calls = True
    login_files = (".codex/auth.json",)
    credential_files = (".codex/auth.json",)
    config_paths = (".codex/",)
    speaks_mcp = True

    def write_tool_config(self, home: Path) -> None:
        """The run's `~/.codex/config.toml`: telemetry off, the profile's endpoint as the
        `loopd` provider (Responses API), and `loopd mcp` when the attempt has a desk."""
        codex_config(home / ".codex" / "config.toml", self.desk, self.settings())

    def settings(self) -> dict[str, Any]:
        """The top-level keys of the run's config.toml that loopd owns."""
        settings: dict[str, Any] = dict(QUIET)
        if self.profile.base_url:
            provider = {"name": PROVIDER, "base_url": self.profile.base_url}
            provider["wire_api"] = "responses"  # the only API Codex 0.171 speaks
            if self.api_key():
                provider["env_key"] = "OPENAI_API_KEY"
            settings["model_provider"] = PROVIDER
            settings["model_providers"] = {PROVIDER: provider}
        return settings

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._last_message = ""
        self._started: set[str] = set()
        self._thread = ""
        # thread id -> (input, output) totals at its last `turn.completed`
        self._totals: dict[str, tuple[int, int]] = {}

    def invocation(self, prompt: str, resume: Resume | None = None) -> Invocation:
        if self.private_home is not None:
            # The endpoint lives in the run's config.toml, not in argv: whoever starts codex (a
            # run's attempt, `loopd check`'s login try) starts it with that file written.
            self.write_tool_config(self.private_home)
        argv = ["codex", "exec", "--json"]
        # Unattended: exec never asks; loopd isolates the run in its own worktree.
        argv.append("--dangerously-bypass-approvals-and-sandbox")
        if self.profile.model:
            argv += ["-m", self.profile.model]
        env: dict[str, str] = {}  # the profile's env is added by the caller
        key = self.api_key()
        if self.profile.base_url:
            # The endpoint is the `loopd` provider of the run's config.toml (`settings`),
            # which reads its key from this variable.
            if key:
                env["OPENAI_API_KEY"] = key
        elif key:
            env["CODEX_API_KEY"] = key  # the key `codex exec` reads for OpenAI itself
        argv += list(self.profile.args)
        if resume:
            argv += ["resume", resume.session_id, positional(resume.message)]
        else:
            argv.append(positional(prompt))
        return Invocation(argv=argv, env=env, home=self.home())

    def parse_line(self, line: str) -> list[AgentEvent]:
        data = self.loads(line)
        if data is None:
            return raw(line)
        kind = data.get("type")
        if kind == "thread.started" and isinstance(data.get("thread_id"), str):
            self._thread = data["thread_id"]
            return [AgentEvent(type="session", session_id=self._thread)]
        if kind == "turn.started":
            self._last_message = ""
            return [AgentEvent(type="raw", text="codex: turn started")]
        if kind == "turn.completed":
            usage = as_object(data.get("usage"))
            # cached_input_tokens are a part of input_tokens, not extra.
            total = (as_int(usage.get("input_tokens")), as_int(usage.get("output_tokens")))
            before = self._totals.get(self._thread, (0, 0))
            self._totals[self._thread] = total
            return [
                AgentEvent(
                    type="usage",
                    input_tokens=max(0, total[0] - before[0]),
                    output_tokens=max(0, total[1] - before[1]),
                ),
                AgentEvent(type="final", text=self._last_message),
            ]
        if kind == "error" and _RETRY.match(as_text(data.get("message"))):
            # A retry, not the session's error: shown as the words, not the JSON line.
            return [AgentEvent(type="raw", text=f"codex: {as_text(data.get('message'))}")]
        if kind in {"turn.failed", "error"}:
            error = data.get("error") if kind == "turn.failed" else data
            message = as_text(error.get("message") if isinstance(error, dict) else None)
            login = bool(_LOGIN.search(message))
            events = [AgentEvent(type="error", text=message or line, login=login)]
            if kind == "turn.failed":
                events.append(AgentEvent(type="final", text=self._last_message, is_error=True))
            return events
        item = data.get("item")
        if kind in {"item.started", "item.updated", "item.completed"} and isinstance(item, dict):
            return self._item(kind, item) or raw(line)
        return raw(line)

    def _item(self, kind: str, item: dict[str, Any]) -> list[AgentEvent]:
        item_type = item.get("type")
        item_id = str(item.get("id") or "")
        if item_type == "agent_message" and kind == "item.completed":
            self._last_message = as_text(item.get("text"))
            return [AgentEvent(type="text", text=self._last_message)]
        # An `error` item is a warning (unknown model metadata, an ignored config key): the
        # turn goes on, so it is a note in the transcript, not the session's error.
        if item_type == "error" and kind == "item.completed":
            return [AgentEvent(type="raw", text=_notice(as_text(item.get("message"))))]
        if item_type not in _TOOL_ITEMS:
            return []
        events = []
        if kind == "item.started" or (kind == "item.completed" and item_id not in self._started):
            self._started.add(item_id)
            events.append(
                AgentEvent(
                    type="tool_call",
                    tool=_tool_name(item),
                    call_id=item_id,
                    arguments=_arguments(item),
                )
            )
        if kind == "item.completed":
            status = item.get("status")
            exit_code = item.get("exit_code")
            failed = status in {"failed", "declined"} or (
                isinstance(exit_code, int) and exit_code != 0
            )
            events.append(
                AgentEvent(
                    type="tool_result",
                    tool=_tool_name(item),
                    call_id=item_id,
                    output=_output(item),
                    is_error=failed,
                    denied=status == "declined",
                )
            )
        return events


def _notice(message: str) -> str:
    """A warning item as a person reads it; the model-metadata one says it is harmless."""
    unknown = _NO_METADATA.match(message)
    if unknown:
        return (
            f"codex: no metadata for model `{unknown.group(1)}` in its catalogue; it goes on "
            "with default metadata (usual for a local model)"
        )
    return f"codex: {message}"


def _tool_name(item: dict[str, Any]) -> str:
    if item.get("type") == "mcp_tool_call":
        return f"{item.get('server', '')}.{item.get('tool', '')}".strip(".")
    if item.get("type") == "collab_tool_call":
        return str(item.get("tool") or "collab_tool_call")
    return str(item.get("type"))


def _arguments(item: dict[str, Any]) -> Any:
    item_type = item.get("type")
    if item_type == "command_execution":
        return {"command": item.get("command")}
    if item_type == "file_change":
        return {"changes": item.get("changes")}
    if item_type == "mcp_tool_call":
        return item.get("arguments")
    if item_type == "web_search":
        return {"query": item.get("query")}
    return {key: value for key, value in item.items() if key not in {"id", "type", "status"}}


def _output(item: dict[str, Any]) -> str:
    item_type = item.get("type")
    if item_type == "command_execution":
        return as_text(item.get("aggregated_output"))
    if item_type == "file_change":
        changes = as_list(item.get("changes"))
        return "\n".join(
            f"{change.get('kind')} {change.get('path')}"
            for change in changes
            if isinstance(change, dict)
        )
    if item_type == "mcp_tool_call":
        error = item.get("error")
        if isinstance(error, dict) and error.get("message"):
            return as_text(error.get("message"))
        result = item.get("result")
        return as_text(result.get("content")) if isinstance(result, dict) else ""
    return as_text(item.get("status"))
