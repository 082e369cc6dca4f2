"""What loopd could have said before the night: the verifier tried, on_push without hooks."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from tests.helpers import daemon_log, loopd, make_home, make_repo, start_daemon
from tests.model_server import ScriptedModelServer
from tests.test_spine import BUGGY, FIXER, agent_config, loop_file


def verifier(url: str, model: str) -> str:
    return f'[verifier]\nbase_url = "{url}"\nmodel = "{model}"\n'


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_verifier_test_lists_the_model(tmp_path: Path, model_server: ScriptedModelServer) -> None:
    home = make_home(tmp_path / "home", verifier(model_server.base_url, "scripted-model"))
    proc = loopd(home, "verifier", "--test")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"verifier {model_server.base_url} answers; model scripted-model" in proc.stdout


def test_verifier_test_says_a_wrong_model_and_its_fix(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    home = make_home(tmp_path / "home", verifier(model_server.base_url, "qwen-typo"))
    proc = loopd(home, "verifier", "--test", "--json")
    assert proc.returncode == 1
    probe = json.loads(proc.stdout)
    assert probe["ok"] is False and probe["models"] == ["scripted-model"]
    assert "'qwen-typo' is not among the models" in probe["text"]
    assert "(scripted-model). Fix: set model to one of them" in probe["text"]
    assert "loopd.toml" in probe["text"]


def test_check_and_the_daemon_s_start_say_a_verifier_that_does_not_answer(
    tmp_path: Path, daemons: list
) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    repo = make_repo(tmp_path / "repo", BUGGY)
    config = verifier(url, "m") + agent_config(FIXER)
    home = make_home(tmp_path / "home", config, {"calc": loop_file(repo)})
    checked = loopd(home, "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"[verifier] base_url {url} does not answer" in checked.stdout
    assert "Fix: start the model server, or correct base_url" in checked.stdout
    tried = loopd(home, "verifier", "--test")
    assert tried.returncode == 1 and "does not answer" in tried.stdout
    daemons.append(start_daemon(home))
    assert f"[verifier] base_url {url} does not answer" in daemon_log(home)


def test_an_on_push_loop_without_loopd_s_hooks_is_warned_of(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    loop = loop_file(repo, on_push=["main"])
    home = make_home(tmp_path / "home", agent_config(FIXER), {"calc": loop})
    checked = loopd(home, "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    warning = f"on_push: {repo} has no loopd hooks for this loop, so no push or commit triggers it"
    assert warning in checked.stdout and "Fix: `loopd hooks install calc`" in checked.stdout
    installed = loopd(home, "hooks", "install", "calc")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "no loopd hooks" not in loopd(home, "check").stdout
