"""SIGTERM stops `loopd once` and `loopd run` in every phase, within their shutdown grace.

Reproduces a `loopd once` that SIGTERM did not stop while its run hung in `preparing` (a
read that never ended; here a rule selection call the verifier never answers) or in
`judging` (a critic call that never returns): the process went on until the call's own
timeout. Real git repositories, the scripted model server hanging its replies, `loopd once`
and `loopd run` as real processes, real signals. No wall-clock assertion: the processes are
waited for with a bound far below the hanging call's timeout.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from daemon.rules.rulefile import dump_rule
from daemon.service.stopdeadline import MIN_STOP, agent_grace, stop_within
from tests.helpers import ROOT, loopd, processes_with, start_daemon, wait_for
from tests.model_server import ScriptedModelServer, call_name
from tests.test_critic_e2e import verdict
from tests.test_landing import land_case
from tests.test_rules_files import make_rule

HANG = 3600  # seconds the model server keeps a hanging call open: far past any wait here
WAIT = 60  # seconds a test waits for a stopped process (grace 1s, so 5s, and slack)


def _home(tmp_path: Path, server: ScriptedModelServer) -> Any:
    """Loop `calc` with a verifier on `server`, a rule only the model can select (its
    pattern does not match the task: the verifier is asked), a 1s grace."""
    config = (
        f'\n[verifier]\nbase_url = "{server.base_url}"\nmodel = "critic"\n'
        'timeout = "1h"\njudge_timeout = "10m"\npending_limit = "1d"\n'
        f'\n[limits]\nshutdown_grace = "1s"\nworktrees = "{tmp_path / "worktrees"}"\n'
    )
    case = land_case(tmp_path, config=config, critic="on")
    rule = make_rule("r-0001-read-check", trigger_patterns=[r"(?i)\bzebra\b"])
    (case.home.root / "rules" / "active" / f"{rule.id}.md").write_text(dump_rule(rule))
    return case


def _hang_in(server: ScriptedModelServer, phase: str) -> None:
    """The verifier hangs the rule selection (preparing) or the critic (judging)."""

    def reply(body: dict[str, Any]) -> Any:
        name = call_name(body)
        if phase == "judging" and name == "trigger_matches":
            return {"json": {"matches": []}}
        return {"hang": HANG, "text": "late"}

    server.script(reply)


def _answers(body: dict[str, Any]) -> Any:
    """The verifier answering again: no rule selected, the attempt judged good."""
    if call_name(body) == "trigger_matches":
        return {"json": {"matches": []}}
    return verdict(9, "Fixed add(); check.py passes.")


def _phase(home: Path) -> str:
    runs = sorted((home / "state" / "runs").glob("*/run.toml"))
    return tomllib.loads(runs[-1].read_text()).get("phase", "") if runs else ""


@pytest.mark.parametrize("phase", ["preparing", "judging"])
def test_sigterm_ends_loopd_once_while_a_phase_hangs(
    tmp_path: Path, model_server: ScriptedModelServer, phase: str
) -> None:
    case = _home(tmp_path, model_server)
    _hang_in(model_server, phase)
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli.main", "--home", str(case.home.root), "once", "calc"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
        text=True,
    )
    try:
        hung = 2 if phase == "judging" else 1  # the rule selection, then the critic
        wait_for(
            lambda: len(model_server.chat_requests()) >= hung and _phase(case.home.root) == phase,
            timeout=120,
            what=f"the run to hang in {phase}",
        )
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    run_id = stdout.splitlines()[0]
    assert proc.returncode != 0
    assert run_id in stderr and "shutdown_grace" in stderr, stderr
    assert not processes_with(run_id)  # nothing it started is left
    # The next `loopd once` ends the run it left as interrupted.
    model_server.script(_answers)
    again = loopd(case.home.root, "once", "calc", timeout=120)
    assert f"ended abandoned run {run_id} as interrupted" in again.stderr, again.stderr
    left = tomllib.loads((case.store.run_dir(run_id) / "run.toml").read_text())
    assert left["outcome"] == "interrupted"


def test_sigterm_ends_the_daemon_while_a_run_hangs_in_preparing(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    case = _home(tmp_path, model_server)
    _hang_in(model_server, "preparing")
    proc = start_daemon(case.home.root)
    try:
        loopd(case.home.root, "trigger", "calc")
        wait_for(
            lambda: model_server.chat_requests() and _phase(case.home.root) == "preparing",
            timeout=120,
            what="the run to hang in preparing",
        )
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = (case.home.root / "daemon.log").read_text()
    assert "shutdown_grace" in log, log


def test_the_grace_is_split_so_the_whole_stop_ends_within_it() -> None:
    """The agent's share and loopd's own ending add up to the grace (at least MIN_STOP)."""
    assert stop_within(30) == 30 and agent_grace(30) == 20  # the default: 10 s are loopd's
    assert stop_within(600) == 600 and agent_grace(600) == 590
    assert stop_within(1) == MIN_STOP and agent_grace(1) == 1  # a short grace stays the agent's
    assert agent_grace(0) == 0
    for grace in (0, 0.5, 1, 4, 5, 7.5, 12, 30, 31, 3600):
        share = agent_grace(grace)
        assert 0 <= share <= grace
        assert stop_within(grace) - share >= min(stop_within(grace) / 3, 10) - 1e-9
