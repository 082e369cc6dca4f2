"""`loopd mcp`: the agent's tools as an MCP server on stdio, bound to one run's desk.

The agent's CLI starts it inside the sandbox from the run's own configuration, with the
run's token and desk (LOOPD_RUN_TOKEN, LOOPD_DESK) in its environment; each call goes to
the desk (daemon/runs/desk.py), which checks the token, does the work and answers. Without
them it still lists its tools, and every call says that it is not bound to a run.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from daemon.agents.deskwire import (
    SOCKET_ENV,
    TOKEN_ENV,
    TOOLS,
    BadArguments,
    ask_desk,
    description,
    schema,
    validated,
)
from daemon.cli.common import CommandError
from daemon.extras import install_command

INSTALL = install_command("mcp")


class ToolFailed(Exception):
    """A call the desk refused or could not do: the MCP result is an error with its text."""


def call(name: str, arguments: dict[str, Any], environ: Any = os.environ) -> str:
    """One tool call, validated and done at the desk (so a refused call is an event too)."""
    token, desk = environ.get(TOKEN_ENV, ""), environ.get(SOCKET_ENV, "")
    if not token or not desk:
        try:  # unbound, yet a bad call still gets the clear error
            validated(name, arguments)
        except BadArguments as exc:
            raise ToolFailed(str(exc)) from None
        raise ToolFailed(f"{name}: not bound to a run (loopd starts this server for its runs)")
    reply = ask_desk(Path(desk), token, name, arguments)
    if not reply.ok:
        raise ToolFailed(reply.text)
    return reply.text


async def _serve() -> None:
    import anyio
    import mcp.types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    server: Any = Server("loopd")

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return [
            types.Tool(name=name, description=description(name), inputSchema=schema(name))
            for name in TOOLS
        ]

    # Validated by the tools' models (clearer messages than the schema's), not twice.
    @server.call_tool(validate_input=False)
    async def call_tool(name: str, arguments: dict[str, Any]) -> list[types.TextContent]:
        text = await anyio.to_thread.run_sync(call, name, arguments)
        return [types.TextContent(type="text", text=text)]

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def mcp_server(args: argparse.Namespace) -> int:
    """Serve the agent's tools (record_evidence, ...) over MCP on stdio, for one run."""
    try:
        import anyio
    except ImportError:
        raise CommandError(f"`loopd mcp` needs the MCP SDK. Fix: {INSTALL}") from None
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise CommandError(f"`loopd mcp` needs the MCP SDK. Fix: {INSTALL}") from None
    anyio.run(_serve)
    return 0
