"""The agent's tools in each CLI's own configuration, written into the run's HOME.

`DeskAccess` is how a run's agent reaches loopd's desk: the argv of `loopd mcp` (loopd's own
interpreter, which the sandbox shows read-only), the environment that binds it to the run
(its token and socket), and a folder holding `loopd-tool` for the agent's PATH. Each CLI that
speaks MCP gets the server in its documented per-user format:

- qwen (Qwen Code) and gemini (Gemini CLI): `~/.qwen/settings.json`, `~/.gemini/settings.json`,
  `mcpServers.loopd` with command, args, env, timeout (ms) and trust; for qwen also
  `alwaysLoadTools` (Qwen Code 0.24 otherwise hides MCP tools behind its tool_search bridge);
- claude (Claude Code): a JSON file of `mcpServers` given with `--mcp-config`;
- codex (Codex CLI): `~/.codex/config.toml`, table `[mcp_servers.loopd]`;
- opencode: its inline config (OPENCODE_CONFIG_CONTENT), `mcp.loopd` of type `local` with
  command (one list) and environment.

The run's HOME is the run's own (agents/homes.py): none of this reaches the person's files,
and nothing an agent writes there leaves the run.

Only when loopd's interpreter can import the `mcp` extra (`mcp_installed`, which every writer
here checks, and which an adapter that writes its own may call): without it `loopd mcp` could
not start, and the CLI would report a failed server (Claude Code's `"status":"failed"`, Gemini
CLI's "MCP issues detected"); the agent still has `loopd-tool`.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from daemon.agents.deskwire import SOCKET_ENV, TOKEN_ENV
from daemon.agents.jsonfields import as_object

SERVER = "loopd"  # the server's name in every configuration (tools: mcp__loopd__..., ...)
TOOL_TIMEOUT_MS = 3_600_000  # record_evidence runs a command: loopd's own timeout bounds it
CLI_NAME = "loopd-tool"


@dataclass(frozen=True)
class DeskAccess:
    """How one attempt's agent reaches loopd's desk."""

    command: list[str]  # argv of `loopd mcp`
    env: dict[str, str] = field(default_factory=dict)  # the run's token and socket
    cli_dir: Path | None = None  # holds `loopd-tool`, put first on the agent's PATH


def mcp_installed() -> bool:
    """Whether `loopd mcp` can serve: loopd's interpreter imports the MCP SDK (the `mcp`
    extra); imported as `loopd mcp` does, so a broken or shadowed install counts as missing
    (once imported, asking again is a lookup in sys.modules)."""
    try:
        import anyio  # noqa: F401
        import mcp  # noqa: F401
    except ImportError:
        return False
    return True


def desk_access(socket_path: Path, token: str, bin_dir: Path) -> DeskAccess:
    """The access to a desk at `socket_path`, with `loopd-tool` written into `bin_dir`."""
    python = sys.executable
    env = {TOKEN_ENV: token, SOCKET_ENV: str(socket_path)}
    write_cli(bin_dir, python, env)
    return DeskAccess([python, "-m", "daemon.cli.main", "mcp"], env, bin_dir)


def write_cli(bin_dir: Path, python: str, env: dict[str, str]) -> Path:
    """`loopd-tool` for the agent: loopd's interpreter with the run's binding (a shell script)."""
    bin_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    lines = ["#!/bin/sh", "# loopd's tools for this run (written by loopd; see `loopd-tool -h`)"]
    lines += [f"export {name}={_sh(value)}" for name, value in sorted(env.items())]
    lines.append(f'exec {_sh(python)} -m daemon.cli.tool "$@"')
    path = bin_dir / CLI_NAME
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path.chmod(stat.S_IRWXU)
    return path


def _sh(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def settings_server(access: DeskAccess) -> dict[str, Any]:
    """The `mcpServers` entry of Qwen Code, Gemini CLI and Claude Code."""
    return {
        "command": access.command[0],
        "args": access.command[1:],
        "env": dict(access.env),
        "timeout": TOOL_TIMEOUT_MS,
        "trust": True,
    }


def merge_settings(path: Path, access: DeskAccess, **extra: Any) -> None:
    """Add the server to a settings.json (`mcpServers`), keeping what the file holds; `extra`:
    keys of the CLI's own for the entry. Without the `mcp` extra the file is left as it is."""
    if not mcp_installed():
        return
    data: dict[str, Any] = {}
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(loaded, dict):
            data = loaded
    except (OSError, ValueError):
        pass
    servers = as_object(data.get("mcpServers"))
    data["mcpServers"] = {**servers, SERVER: {**settings_server(access), **extra}}
    _write(path, json.dumps(data, indent=2) + "\n")


def claude_config(path: Path, access: DeskAccess) -> Path:
    """The file `claude --mcp-config FILE` reads (no server in it without the `mcp` extra)."""
    entry = {"command": access.command[0], "args": access.command[1:], "env": dict(access.env)}
    servers = {SERVER: entry} if mcp_installed() else {}
    _write(path, json.dumps({"mcpServers": servers}, indent=2) + "\n")
    return path


def codex_config(
    path: Path, access: DeskAccess | None, settings: dict[str, Any] | None = None
) -> None:
    """Codex's config.toml with `[mcp_servers.loopd]` when there is a desk, and `settings` (the
    adapter's own top-level keys) over what the file holds (other tables kept when it parses)."""
    data: dict[str, Any] = {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    data.update(settings or {})
    if access is not None and mcp_installed():  # no MCP server without the `mcp` extra
        servers = as_object(data.get("mcp_servers"))
        servers[SERVER] = {
            "command": access.command[0],
            "args": access.command[1:],
            "env": dict(access.env),
            "startup_timeout_sec": 60,
            "tool_timeout_sec": TOOL_TIMEOUT_MS // 1000,
        }
        data["mcp_servers"] = servers
    _write(path, tomli_w.dumps(data))


def opencode_server(access: DeskAccess) -> dict[str, Any]:
    """opencode's `mcp.loopd`: a local server, its command as one list."""
    return {
        "type": "local",
        "command": list(access.command),
        "environment": dict(access.env),
        "enabled": True,
        "timeout": TOOL_TIMEOUT_MS,
    }


def update_settings(path: Path, changes: dict[str, Any]) -> None:
    """Set keys of a settings.json (nested objects merged key by key), keeping the rest."""
    data: dict[str, Any] = {}
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(loaded, dict):
            data = loaded
    except (OSError, ValueError):
        pass
    _write(path, json.dumps(_merged(data, changes), indent=2) + "\n")


def _merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def _write(path: Path, text: str) -> None:
    """Write a config file in the run's HOME: a link the agent left on the way (its folder
    or the file) is removed first, so loopd's write never lands outside the HOME."""
    parent = path.parent
    if parent.is_symlink() or (parent.exists() and not parent.is_dir()):
        parent.unlink()
    parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if os.path.realpath(parent) != os.path.abspath(parent):
        raise OSError(f"{parent} is not a plain folder")
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
