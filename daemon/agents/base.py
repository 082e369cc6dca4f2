"""The agent adapter interface: how to start an agent, and how to read its stream."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict

from daemon.config import AgentProfile

EventType = Literal["session", "text", "tool_call", "tool_result", "usage", "final", "error", "raw"]


class AgentEvent(BaseModel):
    """One normalized event of an agent's stream."""

    model_config = ConfigDict(extra="forbid")

    type: EventType
    session_id: str = ""
    text: str = ""  # text, final, error, raw
    tool: str = ""  # tool_call, tool_result
    call_id: str = ""  # pairs a tool_call with its tool_result
    arguments: Any = None  # tool_call: the arguments as the agent sent them
    output: str = ""  # tool_result: what the tool returned
    is_error: bool = False  # tool_result, final: the tool or the session failed
    denied: bool = False  # tool_result: a permission was refused
    input_tokens: int = 0  # usage
    output_tokens: int = 0  # usage
    cost_usd: float = 0.0  # usage, where the agent reports it


@dataclass
class Resume:
    """A follow-up message to an agent session that already ran."""

    session_id: str
    message: str


@dataclass
class Invocation:
    """What to start: argv, what goes to stdin (None: /dev/null), extra environment."""

    argv: list[str]
    stdin: bytes | None = None
    env: dict[str, str] = field(default_factory=dict)
    home: Path | None = None  # a private HOME for the agent, created before the start


def is_local_url(url: str) -> bool:
    """Whether an endpoint is on this machine (loopback or localhost)."""
    host = (urlparse(url).hostname or "").lower()
    return host in {"localhost", "::1"} or host.startswith("127.") or host.endswith(".localhost")


class AgentAdapter(ABC):
    """One coding agent CLI. Subclasses say how to start it and declare what it can do."""

    name: ClassVar[str]
    structured_stream: ClassVar[bool] = False  # emits JSON events, one per line
    session_resume: ClassVar[bool] = False  # a nudge can continue the same session
    usage: ClassVar[bool] = False  # reports token usage
    tool_calls: ClassVar[bool] = False  # reports tool calls and their results

    def __init__(self, profile: AgentProfile, private_home: Path | None = None) -> None:
        self.profile = profile
        self.private_home = private_home

    @abstractmethod
    def invocation(self, prompt: str, resume: Resume | None = None) -> Invocation:
        """The process to start for a prompt, or for a follow-up to a session."""

    def parse_line(self, line: str) -> list[AgentEvent]:
        """Normalize one line of output; what does not parse is kept as raw text."""
        return [AgentEvent(type="raw", text=line)]

    def wants_private_home(self) -> bool:
        """A profile on a local endpoint keeps the agent's config and sessions apart."""
        return bool(self.profile.base_url) and is_local_url(self.profile.base_url)

    def api_key(self, environ: dict[str, str]) -> str:
        """The key named by the profile's `api_key_env`, or empty."""
        return environ.get(self.profile.api_key_env, "") if self.profile.api_key_env else ""

    @staticmethod
    def loads(line: str) -> dict[str, Any] | None:
        """Parse a JSON object line; None when the line is not one."""
        try:
            value = json.loads(line)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None
