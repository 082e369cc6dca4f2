"""Issue 20, item 2: `[verifier] second`: an attempt passes only when both judges pass it,
and `loopd calibrate` reports each judge and the pair."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from daemon.stats import wilson
from tests.helpers import loopd, make_home, make_repo
from tests.model_server import ScriptedModelServer
from tests.test_critic_e2e import fixer, loop_file, read_run, read_verdict

FIRST_TWO_BUGS = 14


def config(server: ScriptedModelServer, agent: bool = True) -> str:
    lines = [
        "[verifier]",
        f'base_url = "{server.base_url}"',
        'model = "critic-model"',
        'timeout = "5s"',
        'pending_limit = "60s"',
        'second = "second"',
        "",
        "[agents.second]",
        f'base_url = "{server.base_url}"',
        'model = "second-model"',
    ]
    if agent:
        argv = json.dumps([__import__("sys").executable, "-c", fixer()])
        lines += ["", "[agents.fixer]", 'adapter = "command"', f"command = {argv}"]
    return "\n".join(lines) + "\n"


def reply(score: int, text: str) -> dict[str, Any]:
    return {"json": {"score": score, "verdict": text, "unsupported_claims": [], "feedback": ""}}


def by_model(first: int, second: int) -> Any:
    """A server script: `critic-model` scores `first`, `second-model` scores `second`."""

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        if body.get("model") == "second-model":
            return reply(second, "the second judge's verdict")
        return reply(first, "the first judge's verdict")

    return answer


def test_an_attempt_passes_only_when_both_judges_pass_it(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.script(by_model(9, 3))
    repo = make_repo(
        tmp_path / "repo",
        {
            "calc.py": "def add(a, b):\n    return a - b\n",
            "check.py": "from calc import add\nassert add(2, 3) == 5\n",
        },
    )
    home = make_home(
        tmp_path / "home", config(model_server), {"calc": loop_file(repo, max_attempts=1)}
    )
    proc = loopd(home, "once", "calc", timeout=300)
    run_id = proc.stdout.splitlines()[0]
    run = read_run(home, run_id)
    assert run["outcome"] != "succeeded", run
    saved = read_verdict(home, run_id, 1)
    assert saved["passed"] is False and saved["score"] == 3
    assert saved["model"] == "critic-model + second-model"
    assert "the second judge's verdict" in saved["verdict"]
    models = {body.get("model") for body in model_server.chat_requests("critic_verdict")}
    assert models == {"critic-model", "second-model"}


def test_calibrate_reports_each_judge_and_the_pair(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.script(by_model(9, 2))
    home = make_home(tmp_path / "home", config(model_server, agent=False))
    done = loopd(home, "calibrate", "--json", "--limit", str(FIRST_TWO_BUGS), timeout=300)
    assert done.returncode == 0, done.stderr
    first, second, pair = json.loads(done.stdout)["models"]
    assert first["model"] == "critic-model" and first["false_pass_rate"] == 1.0
    assert second["model"] == "second-model" and second["false_pass_rate"] == 0.0
    assert pair["model"] == "critic-model + second-model"
    assert pair["false_pass_rate"] == 0.0 and pair["false_fail_rate"] == 1.0
    assert pair["false_fail_ci"] == pytest.approx(list(wilson(2, 2)))
    assert pair["tokens"] == first["tokens"] + second["tokens"]
    kept = sorted(p.name for p in (home / "state" / "calibration").iterdir())
    assert kept == ["critic-model.toml", "critic-model___second-model.toml", "second-model.toml"]
    # The judge in use is the pair: its calibration is the one status and check read.
    check = loopd(home, "check")
    assert "critic-model + second-model" not in check.stdout, check.stdout


def test_a_second_judge_that_names_no_profile_is_a_config_error(tmp_path: Path) -> None:
    home = make_home(
        tmp_path / "home",
        '[verifier]\nbase_url = "http://127.0.0.1:9/v1"\nsecond = "nope"\n',
    )
    check = loopd(home, "check")
    assert check.returncode == 2
    assert "[verifier] second = 'nope' names no [agents.nope] with a base_url" in check.stdout
