"""The agent adapter interface: how to start an agent, and how to read its stream."""

from __future__ import annotations

import json
import math
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from daemon.agents.deskconfig import DeskAccess

# Re-exported: the adapters read their stream fields through their base.
from daemon.agents.jsonfields import as_list as as_list
from daemon.agents.jsonfields import as_object as as_object
from daemon.config import AgentProfile

# `notice`: something the agent's program itself said (a request it will retry), neither the
# model's words nor an error the session ended on. `prompt`: the agent's echo of what it was
# asked (loopd's prompt or nudge), not its own words.
EventType = Literal[
    "session",
    "text",
    "tool_call",
    "tool_result",
    "usage",
    "final",
    "error",
    "notice",
    "raw",
    "prompt",
]


class AgentEvent(BaseModel):
    """One normalized event of an agent's stream."""

    model_config = ConfigDict(extra="forbid")

    type: EventType
    session_id: str = ""
    text: str = ""  # text, final, error, notice, raw, prompt
    tool: str = ""  # tool_call, tool_result
    call_id: str = ""  # pairs a tool_call with its tool_result
    arguments: Any = None  # tool_call: the arguments as the agent sent them
    output: str = ""  # tool_result: what the tool returned
    is_error: bool = False  # tool_result, final: the tool or the session failed
    denied: bool = False  # tool_result: a permission was refused
    input_tokens: int = 0  # usage
    output_tokens: int = 0  # usage
    cost_usd: float = 0.0  # usage, where the agent reports it
    quota: bool = False  # error: its structure says a usage limit was hit
    reset_at: float = 0.0  # error: epoch seconds when that limit resets, where given
    login: bool = False  # error: its structure says the credentials were refused (401/403)
    delta: bool = False  # text: one piece of a message streamed in pieces (Gemini CLI)


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
    home: Path | None = None  # the run's HOME for the agent, created before the start


class AgentAdapter(ABC):
    """One coding agent CLI. Subclasses say how to start it and declare what it can do."""

    name: ClassVar[str]
    structured_stream: ClassVar[bool] = False  # emits JSON events, one per line
    session_resume: ClassVar[bool] = False  # a nudge can continue the same session
    usage: ClassVar[bool] = False  # reports token usage
    tool_calls: ClassVar[bool] = False  # reports tool calls and their results
    # A follow-up needs the session id from the stream (aider restores its history without one).
    resume_needs_id: ClassVar[bool] = True
    # The agent's HOME is the run's own (daemon/agents/homes.py). Paths are relative to HOME:
    # the files that log the agent in, copied into the run's HOME from the real one;
    login_files: ClassVar[tuple[str, ...]] = ()
    # of those, the ones the agent refreshes (OAuth tokens), copied back at the run's end;
    credential_files: ClassVar[tuple[str, ...]] = ()
    # where the agent writes its config and sessions (a trailing / marks a folder, made empty).
    config_paths: ClassVar[tuple[str, ...]] = ()
    # Its CLI reaches MCP servers from its configuration: it gets `loopd mcp` there
    # (agents/deskconfig.py); every agent also finds `loopd-tool` on its PATH.
    speaks_mcp: ClassVar[bool] = False
    # Its CLI retries a usage limit on its own for long (aider: a minute): the supervisor ends
    # the process at the adapter's usage-limit error event, and the run parks as on any other.
    stop_at_limit: ClassVar[bool] = False
    # What the program writes into the tree for itself (gitignore patterns from the top of the
    # tree): its caches, never the work. Kept out of loopd's commits, so never landed.
    tree_litter: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        profile: AgentProfile,
        private_home: Path | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.profile = profile
        # The run's HOME for the agent (set by the caller; None: the caller's HOME).
        self.private_home = private_home
        # A folder outside the run's tree and outside state/ for files an agent keeps between
        # its processes (aider's chat history); set by the caller, removed with the worktree.
        self.scratch: Path | None = None
        # loopd's own environment, where the key named by `api_key_env` lives; tests pass their own.
        self.environ: Mapping[str, str] = os.environ if environ is None else environ
        # How this attempt's agent reaches loopd's desk (set by the caller; None: no tools).
        self.desk: DeskAccess | None = None
        # loopd's own sandbox confines the agent (set by the caller): its CLI's own checks
        # for running unconfined (as root) need not hold it back.
        self.sandboxed = False

    def write_tool_config(self, home: Path) -> None:
        """Write `loopd mcp` into the agent's configuration under `home` (its CLI's format);
        an agent without MCP has only `loopd-tool`, so nothing is written."""
        return None

    @abstractmethod
    def invocation(self, prompt: str, resume: Resume | None = None) -> Invocation:
        """The process to start for a prompt, or for a follow-up to a session."""

    def parse_line(self, line: str) -> list[AgentEvent]:
        """Normalize one line of output; what does not parse is kept as raw text."""
        return [AgentEvent(type="raw", text=line)]

    def api_key(self, environ: Mapping[str, str] | None = None) -> str:
        """The key named by the profile's `api_key_env`, or empty."""
        source = self.environ if environ is None else environ
        return source.get(self.profile.api_key_env, "") if self.profile.api_key_env else ""

    def home(self) -> Path | None:
        """The HOME the agent starts with (the caller creates it)."""
        return self.private_home

    @staticmethod
    def loads(line: str) -> dict[str, Any] | None:
        """Parse a JSON object line; None when the line is not one."""
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
            return None
        return value if isinstance(value, dict) else None


def positional(text: str) -> str:
    """A prompt safe to pass as one argv word: a leading dash would read as an option."""
    # A space changes nothing for the model and keeps the CLI's option parser off the text.
    return " " + text if text.startswith("-") else text


def raw(line: str) -> list[AgentEvent]:
    """The one event for a line that carries nothing to normalize: the line kept as it was."""
    return [AgentEvent(type="raw", text=line)]


def as_text(value: Any) -> str:
    """Tool output as text: strings as they are, content blocks joined, anything else as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for item in value:
            if isinstance(item, dict) and isinstance(item.get("text"), str):
                parts.append(item["text"])
            else:
                parts.append(as_text(item))
        return "\n".join(parts)
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


def as_int(value: Any) -> int:
    """A token count from a stream: numbers as ints, anything else as 0."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    return 0


def as_float(value: Any) -> float:
    """A cost from a stream: numbers as floats, anything else as 0."""
    if isinstance(value, bool):
        return 0.0
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return 0.0


# How the agents word a refused permission in a failed tool result: Qwen Code ("requires
# permission to use X, but that permission was declined"), Claude Code ("requested permissions
# to use X, but you haven't granted it yet", "The tool use was rejected"), opencode ("rejected
# permission to use this specific tool call"), Gemini CLI (policy denials). Only consulted for
# results already marked as errors; a shell's own "Permission denied" (EACCES) is not one.
_DENIAL = re.compile(
    r"requested permissions? to use"
    r"|requires? permission to use"
    r"|permission to use \S+ (?:has been|was) (?:denied|declined|rejected|refused)"
    r"|permissions? (?:was|were|has been|have been) (?:declined|denied|rejected|refused)"
    r"|rejected permission"
    r"|tool use was rejected"
    r"|denied by (?:the )?(?:policy|user)",
    re.IGNORECASE,
)


def is_denial(text: str) -> bool:
    """Whether a failed tool's output says a permission was refused."""
    return bool(_DENIAL.search(text[:2000]))
