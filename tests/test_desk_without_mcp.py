"""Without the `mcp` extra, loopd writes no MCP server into any agent CLI's configuration:
`loopd mcp` could not start, and the CLIs would report a failed server (Claude Code's init line
`"status":"failed"`, Gemini CLI's "MCP issues detected"). The agent keeps `loopd-tool`.

An interpreter that cannot import `mcp` is made as on an install without the extra: a shim
first on PYTHONPATH that fails as a missing package does (tests/test_missing_extra.py).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w

from tests.helpers import events, loopd, make_home, make_repo, runs
from tests.model_server import ScriptedModelServer, Spec
from tests.sandboxing import require_bwrap
from tests.test_e2e_qwen import BUGGY, CHECK, QWEN, TASK, Turn, agent_script

ROOT = Path(__file__).resolve().parents[1]


def without_mcp(tmp_path: Path) -> dict[str, str]:
    shim = tmp_path / "shim" / "mcp"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'mcp'\", name='mcp')\n"
    )
    return {"PYTHONPATH": str(shim.parent)}


WRITE = """
import json, sys, tomllib
from pathlib import Path
from daemon.agents.deskconfig import (
    DeskAccess, claude_config, codex_config, mcp_installed, merge_settings,
)
from daemon.agents.opencode import OpencodeAdapter
from daemon.config import AgentProfile
home = Path(sys.argv[1])
access = DeskAccess([sys.executable, "-m", "daemon.cli.main", "mcp"], {"T": "t"})
(home / ".gemini").mkdir()
(home / ".gemini" / "settings.json").write_text('{"security": {"auth": {"selectedType": "x"}}}')
merge_settings(home / ".gemini" / "settings.json", access)
claude_config(home / "claude.json", access)
codex_config(home / ".codex" / "config.toml", access)
opencode = OpencodeAdapter(AgentProfile(adapter="opencode"), home, environ={})
opencode.desk = access
inline = json.loads(opencode.invocation("x").env["OPENCODE_CONFIG_CONTENT"])
codex = home / ".codex" / "config.toml"
print(json.dumps({
    "installed": mcp_installed(),
    "gemini": json.loads((home / ".gemini" / "settings.json").read_text()),
    "claude": json.loads((home / "claude.json").read_text()),
    "codex": tomllib.loads(codex.read_text()) if codex.exists() else {},
    "opencode": inline,
}))
"""


@pytest.mark.parametrize("installed", [True, False])
def test_each_cli_gets_loopd_mcp_only_with_the_extra(tmp_path: Path, installed: bool) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, **({} if installed else without_mcp(tmp_path))}
    if not installed:
        env["PYTHONPATH"] += os.pathsep + str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", WRITE, str(home)], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["installed"] is installed
    assert ("loopd" in found["gemini"].get("mcpServers", {})) is installed
    assert found["gemini"]["security"]["auth"]["selectedType"] == "x"  # the user's kept
    assert ("loopd" in found["claude"]["mcpServers"]) is installed
    assert ("loopd" in found["codex"].get("mcp_servers", {})) is installed
    assert ("loopd" in found["opencode"].get("mcp", {})) is installed


@pytest.mark.skipif(QWEN is None, reason="the real qwen CLI is needed (see test_e2e_qwen)")
def test_qwen_run_without_the_extra_lists_no_loopd_server(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    require_bwrap()
    tools: list[list[str]] = []

    def decide(turn: Turn) -> Spec:
        names = [t.get("function", {}).get("name", "") for t in turn.body.get("tools") or []]
        tools.append(names)
        return "Nothing to do."

    model_server.script(agent_script(decide))
    repo = make_repo(tmp_path / "repo", {"calc.py": BUGGY, "check.py": CHECK})
    profile = {"adapter": "qwen", "model": "qwen3-coder-test", "base_url": model_server.base_url}
    loop = {
        "repo": str(repo),
        "task": TASK,
        "agent": "qwen",
        "done_when": [f"{shlex.quote(sys.executable)} check.py"],
        "max_attempts": 1,
        "max_nudges": 0,
        "attempt_timeout": "120s",
    }
    home = make_home(
        tmp_path / "home",
        tomli_w.dumps({"agents": {"qwen": profile}}),
        {"fix": tomli_w.dumps(loop)},
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    assert QWEN is not None
    (bin_dir / "qwen").symlink_to(QWEN.resolve())
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **without_mcp(tmp_path)}
    env["PYTHONPATH"] += os.pathsep + str(ROOT)
    loopd(home, "once", "fix", timeout=300, env=env)
    (run,) = runs(home)
    assert run["attempts"], run
    assert [e["tools"] for e in events(home) if e["type"] == "desk_opened"] == [["cli"]]
    assert tools and not any("loopd" in name for names in tools for name in names), tools
