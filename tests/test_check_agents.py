"""`loopd check` says, per enabled loop, whether its agent's program is found as the sandbox
finds it (the daemon's PATH, links followed) and which version `PROGRAM --version` prints.

Real parts: `loopd check` as a subprocess, the real Qwen Code CLI linked on PATH.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import tomli_w

from tests.helpers import loopd, make_home, make_repo
from tests.test_e2e_qwen import QWEN


@pytest.mark.skipif(QWEN is None, reason="the real qwen CLI is needed (see test_e2e_qwen)")
def test_check_names_each_loops_agent_program_and_its_version(tmp_path: Path) -> None:
    assert QWEN is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "qwen").symlink_to(QWEN.resolve())
    version = subprocess.run(
        [str(QWEN), "--version"], capture_output=True, text=True, timeout=60
    ).stdout.strip()
    assert version
    agents = {
        "qwen": {"adapter": "qwen", "model": "m", "base_url": "http://127.0.0.1:9/v1"},
        "gone": {"adapter": "command", "command": ["no-such-agent-program-a7f3", "{prompt}"]},
    }
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    loop = {"repo": str(repo), "task": "t", "done_when": ["true"], "critic": "off"}
    loops = {
        "fix": tomli_w.dumps({**loop, "agent": "qwen"}),
        "lost": tomli_w.dumps({**loop, "agent": "gone"}),
    }
    home = make_home(tmp_path / "home", tomli_w.dumps({"agents": agents}), loops)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    text = loopd(home, "check", env=env, timeout=120).stdout
    assert f"  fix: agent {bin_dir / 'qwen'} ({version})" in text, text
    assert "  lost: agent 'no-such-agent-program-a7f3' not found on the daemon's PATH" in text
    data = json.loads(loopd(home, "check", "--json", env=env, timeout=120).stdout)
    assert data["agents"]["fix"]["version"] == version
    assert data["agents"]["fix"]["found"] == str(bin_dir / "qwen")
    assert data["agents"]["lost"]["found"] == ""
