"""What loopd could have said before the night: the verifier tried, on_push without hooks."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime
from pathlib import Path

from daemon.state.records import Trigger
from daemon.state.store import StateStore
from tests.helpers import daemon_log, loopd, make_home, make_repo, runs, start_daemon, wait_for
from tests.model_server import ScriptedModelServer
from tests.test_spine import BUGGY, FIXER, agent_config, loop_file


def verifier(url: str, model: str) -> str:
    return f'[verifier]\nbase_url = "{url}"\nmodel = "{model}"\n'


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_verifier_test_lists_the_model(
    tmp_path: Path, model_server: ScriptedModelServer, daemons: list
) -> None:
    home = make_home(tmp_path / "home", verifier(model_server.base_url, "scripted-model"))
    proc = loopd(home, "verifier", "--test")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"verifier {model_server.base_url} answers; model scripted-model" in proc.stdout
    checked = loopd(home, "check")
    assert f"verifier {model_server.base_url} answers; model scripted-model" in checked.stdout
    daemons.append(start_daemon(home))
    said = f"loopd: verifier {model_server.base_url} answers; model scripted-model"
    wait_for(lambda: said in daemon_log(home), what="the start's verifier line")


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
    said = f"[verifier] base_url {url} does not answer"
    wait_for(lambda: said in daemon_log(home), what="the start's verifier warning")


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


def test_the_daemon_s_console_says_each_run_start_end_and_escalation(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    idle = agent_config("print('nothing')").replace("fixer", "idle")
    loops = {
        "calc": loop_file(repo),
        "stuck": loop_file(repo, max_attempts=1).replace('"fixer"', '"idle"'),
    }
    home = make_home(tmp_path / "home", agent_config(FIXER) + idle, loops)
    daemons.append(start_daemon(home))
    store = StateStore(home / "state")
    at = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)
    for loop in ("calc", "stuck"):
        store.put_trigger(Trigger(loop=loop, kind="manual", reason="by hand", ts=at))
    wait_for(lambda: len([r for r in runs(home) if r.get("outcome")]) == 2, what="both runs")
    by_loop = {r["loop"]: r["id"] for r in runs(home)}
    fixed, stuck = by_loop["calc"], by_loop["stuck"]
    lines = [
        f"loopd: run {fixed} started (loop calc, manual: by hand)",
        f"loopd: run {fixed} ended succeeded: checks pass on attempt 1",
        f"loopd: run {stuck} started (loop stuck, manual: by hand)",
        f"loopd: run {stuck} ended escalated: attempts used up; checks still fail after 1 attempt",
        f"loopd: run {stuck} escalated (checks-failed): state/escalations/{stuck}.md",
    ]
    wait_for(lambda: all(line in daemon_log(home) for line in lines), what="the console lines")
