"""The agent's tools and loopd's desk: what the agent may hand loopd during a run, and how.

The agent calls a tool (through `loopd mcp`, an MCP server its CLI starts inside the sandbox,
or `loopd-tool` on its PATH); the call goes as one JSON line over the run's unix socket, in
the run's scratch folder, to the desk the attempt keeps open (daemon/runs/desk.py), which
checks the run's token, validates, does the work and answers with one JSON line. The agent
never writes `state/`: the sandbox does not show it, and the desk is the only way in.

Each tool's arguments are a pydantic model with bounded fields, so a bad call gets a clear
error naming the field, and no call can hand loopd more than a few kilobytes.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

# The variables the tools' server and `loopd-tool` find the desk by (set in their own config,
# never in the agent's environment).
TOKEN_ENV = "LOOPD_RUN_TOKEN"
SOCKET_ENV = "LOOPD_DESK"
SOCKET_NAME = "desk.sock"  # in the run's scratch folder
REQUEST_MAX = 64_000  # bytes of one request line
REPLY_MAX = 200_000  # bytes of one reply line
CALL_TIMEOUT = 3600.0  # seconds a call may wait for the desk (record_evidence runs a command)


# Bounded texts, one alias per bound (a type checker reads aliases, not calls).
Text200 = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
Text500 = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=500)]
Text600 = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=600)]
Text1200 = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=1200)]
Text2000 = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2000)]
Text4000 = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=4000)]


Path300 = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=300)]


class ToolInput(BaseModel):
    """A tool's arguments: unknown fields are refused, every text is bounded."""

    model_config = ConfigDict(extra="forbid")


class RecordDecision(ToolInput):
    """Record a design decision you made, why, and what you ruled out. The critic reads it."""

    title: Text200 = Field(description="the decision in a few words")
    why: Text4000 = Field(description="why you chose it")
    alternatives: list[Text500] = Field(
        default_factory=list, max_length=10, description="what you considered and ruled out"
    )


class RecordEvidence(ToolInput):
    """Back a claim with a command loopd runs itself on your work as it stands (committed
    first, run in a clean tree in the sandbox); the critic sees the claim and its result."""

    claim: Text2000 = Field(description="what you claim, e.g. 'the parser handles empty input'")
    command: Text2000 = Field(description="a shell command whose exit code 0 proves it")


class NoteKnowledge(ToolInput):
    """Propose a lesson for later runs; loopd's rule verifier decides whether it is kept."""

    kind: Literal["knowledge", "skill"] = Field(
        description="knowledge: a fact of this repository; skill: a procedure that works"
    )
    text: Text600 = Field(description="the lesson, one or two sentences (8 characters or more)")
    why: Text1200 = Field(
        description="what this run showed: quote its output or files verbatim (8 or more)"
    )
    paths: list[Path300] = Field(
        default_factory=list, max_length=10, description="repository paths it concerns"
    )


class AskPerson(ToolInput):
    """Ask a person a question; the run goes on (the answer comes in a later run)."""

    question: Text4000 = Field(description="the question, with what you need to know")


class RulesFor(ToolInput):
    """The rules from earlier runs that apply to a task, with their ids."""

    task: Text4000 = Field(description="the task or subtask")
    paths: list[Path300] = Field(
        default_factory=list, max_length=50, description="files it touches"
    )


TOOLS: dict[str, type[ToolInput]] = {
    "record_decision": RecordDecision,
    "record_evidence": RecordEvidence,
    "note_knowledge": NoteKnowledge,
    "ask_person": AskPerson,
    "rules_for": RulesFor,
}


class DeskRequest(BaseModel):
    """One call as it reaches the desk."""

    model_config = ConfigDict(extra="forbid")

    token: str = Field(max_length=200)
    tool: str = Field(max_length=100)
    arguments: dict[str, Any] = Field(default_factory=dict)


class DeskReply(BaseModel):
    """The desk's answer: the text the agent reads, and whether the call did what it asked."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    text: str


class BadArguments(ValueError):
    """A tool's arguments do not fit its model; the message names each field and why."""


def validated(tool: str, arguments: Any) -> ToolInput:
    """The tool's arguments as its model; BadArguments with a clear message when they are not."""
    model = TOOLS.get(tool)
    if model is None:
        raise BadArguments(f"unknown tool {tool!r}; the tools are: {', '.join(TOOLS)}")
    if not isinstance(arguments, dict):
        raise BadArguments(f"{tool}: the arguments must be an object")
    try:
        return model.model_validate(arguments)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"]) or "(arguments)"
            problems.append(f"{field}: {err['msg']}")
        raise BadArguments(f"{tool}: bad arguments: " + "; ".join(problems)) from None


def schema(tool: str) -> dict[str, Any]:
    """The JSON schema of a tool's arguments, as the MCP server lists it."""
    return TOOLS[tool].model_json_schema()


def description(tool: str) -> str:
    """A tool's one-paragraph description (its model's docstring)."""
    return " ".join((TOOLS[tool].__doc__ or "").split())


def _address(path: Path) -> tuple[str, int | None]:
    """A unix socket address for `path`, and a folder descriptor to close after: a path too long
    for sun_path (108 bytes) is reached through /proc/self/fd/N/NAME of its folder."""
    text = str(path)
    if len(text.encode()) < 100:
        return text, None
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    return f"/proc/self/fd/{fd}/{path.name}", fd


def bind_socket(path: Path) -> socket.socket:
    """A listening unix socket at `path` (an old one removed), readable by its owner only."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    address, fd = _address(path)
    try:
        sock.bind(address)
    finally:
        if fd is not None:
            os.close(fd)
    os.chmod(path, 0o600)
    sock.listen(8)
    return sock


def read_line(conn: socket.socket, limit: int) -> bytes:
    """One newline-ended line from `conn`, at most `limit` bytes; ValueError past that."""
    data = bytearray()
    while b"\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
        if len(data) > limit:
            raise ValueError(f"a message longer than {limit} bytes")
    return bytes(data.split(b"\n", 1)[0])


def ask_desk(
    path: Path, token: str, tool: str, arguments: dict[str, Any], timeout: float = CALL_TIMEOUT
) -> DeskReply:
    """Hand one call to the run's desk and wait for its answer."""
    request = DeskRequest(token=token, tool=tool, arguments=arguments)
    line = request.model_dump_json().encode() + b"\n"
    if len(line) > REQUEST_MAX:
        return DeskReply(ok=False, text=f"{tool}: the call is over {REQUEST_MAX} bytes")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    address, fd = _address(path)
    try:
        sock.connect(address)
        sock.sendall(line)
        answer = read_line(sock, REPLY_MAX)
    except OSError as exc:
        return DeskReply(ok=False, text=f"{tool}: loopd's desk did not answer ({exc})")
    except ValueError as exc:
        return DeskReply(ok=False, text=f"{tool}: {exc}")
    finally:
        sock.close()
        if fd is not None:
            os.close(fd)
    try:
        return DeskReply.model_validate(json.loads(answer))
    except (ValueError, ValidationError):
        return DeskReply(ok=False, text=f"{tool}: loopd's desk gave no answer (closed early)")
