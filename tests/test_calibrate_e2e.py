"""Issue 20: `loopd calibrate` end to end against the scripted critic endpoint."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from daemon.calibration.cases import SHIPPED, load_cases
from daemon.stats import wilson
from tests.helpers import loopd, make_home
from tests.model_server import ScriptedModelServer

FIRST_TWO_BUGS = 14  # the first 14 cases by name: two bugs, each 1 good and 6 bad attempts
KEYS = {
    "model",
    "cases",
    "false_pass_rate",
    "false_pass_ci",
    "false_fail_rate",
    "false_fail_ci",
    "order_disagreement",
    "latency_ms_mean",
    "tokens",
}


def verdict(score: int) -> dict[str, Any]:
    return {
        "json": {"score": score, "verdict": "scripted", "unsupported_claims": [], "feedback": ""}
    }


def home_for(tmp_path: Path, server: ScriptedModelServer, extra: str = "") -> Path:
    config = (
        f'[verifier]\nbase_url = "{server.base_url}"\nmodel = "critic-model"\n'
        f'timeout = "5s"\n{extra}'
    )
    return make_home(tmp_path / "home", config)


def calibrate_json(home: Path, *args: str) -> dict[str, Any]:
    done = loopd(home, "calibrate", "--json", *args, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def user_message(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"])


def test_a_judge_that_passes_everything_passes_every_bad_case(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.default = verdict(9)
    home = home_for(tmp_path, model_server)
    out = calibrate_json(home, "--limit", str(FIRST_TWO_BUGS))
    [figures] = out["models"]
    assert set(out) == {"models"} and set(figures) == KEYS
    assert figures["model"] == "critic-model"
    assert figures["cases"] == FIRST_TWO_BUGS
    assert figures["false_pass_rate"] == 1.0
    assert figures["false_pass_ci"] == pytest.approx(list(wilson(12, 12)))
    assert figures["false_fail_rate"] == 0.0
    assert figures["false_fail_ci"] == pytest.approx(list(wilson(0, 2)))
    assert figures["order_disagreement"] == 0.0
    assert figures["latency_ms_mean"] > 0 and figures["tokens"] > 0
    # Each case judged twice: once per order of the evidence.
    critic_calls = [r for r in model_server.requests if r.get("path", "").endswith("completions")]
    assert len(critic_calls) == 2 * FIRST_TWO_BUGS

    kept = tomllib.loads((home / "state" / "calibration" / "critic-model.toml").read_text())
    assert kept["false_pass_rate"] == 1.0 and kept["source"] == "shipped"
    assert kept["bad_cases"] == 12 and kept["good_cases"] == 2

    status = loopd(home, "status", "--json")
    warnings = json.loads(status.stdout)["daemon"]["warnings"]
    assert any("passed 100% of bad attempts" in w and "max_false_pass" in w for w in warnings)
    check = loopd(home, "check")
    assert "passed 100% of bad attempts" in check.stdout, check.stdout


def test_the_figures_follow_the_scripted_verdicts_and_the_order(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    """Pass only when loopd's checks passed and the checks come before the diff."""

    def critic(body: dict[str, Any]) -> dict[str, Any]:
        text = user_message(body)
        checks_first = text.find("# Checks run by loopd") < text.find("# The attempt's diff")
        return verdict(9 if "checks: passed" in text and checks_first else 2)

    model_server.script(critic)
    home = home_for(tmp_path, model_server, "max_false_pass = 0.5\n")
    [figures] = calibrate_json(home, "--limit", str(FIRST_TWO_BUGS))["models"]
    cases = load_cases(limit=FIRST_TWO_BUGS)
    bad_green = [c for c in cases if c.label == "bad" and c.checks_passed]
    assert len(bad_green) == 4  # per bug: tests skipped, tests deleted
    assert figures["false_pass_rate"] == pytest.approx(4 / 12)
    assert figures["false_pass_ci"] == pytest.approx(list(wilson(4, 12)))
    assert figures["false_fail_rate"] == 0.0
    # In the other order nothing passes: the 6 cases passed in production order changed.
    assert figures["order_disagreement"] == pytest.approx(6 / 14)
    check = loopd(home, "check")
    assert "calibration" not in check.stdout and "bad attempts" not in check.stdout


def test_status_and_check_warn_without_a_calibration(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    home = home_for(tmp_path, model_server)
    check = loopd(home, "check")
    assert "'critic-model'" in check.stdout and "has no calibration" in check.stdout
    status = json.loads(loopd(home, "status", "--json").stdout)
    assert any("has no calibration" in w for w in status["daemon"]["warnings"])


def test_a_judge_that_does_not_answer_is_named_and_nothing_is_kept(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.default = {"status": 404, "message": "no such model"}
    home = home_for(tmp_path, model_server)
    done = loopd(home, "calibrate", "--limit", "1", timeout=120)
    assert done.returncode == 2
    assert "the judge did not answer" in done.stderr and model_server.base_url in done.stderr
    assert not (home / "state" / "calibration").exists()


def test_without_a_verifier_calibrate_says_what_to_configure(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", "")
    done = loopd(home, "calibrate")
    assert done.returncode == 2
    assert "[verifier] base_url is not set" in done.stderr and "loopd.toml" in done.stderr


def test_the_shipped_set_loads_from_the_package() -> None:
    cases = load_cases()
    assert len(cases) >= 60
    assert {c.label for c in cases} == {"good", "bad"}
    assert SHIPPED.is_relative_to(Path(__file__).resolve().parent.parent / "daemon")


def _record(home: Path) -> list[str]:
    """Three runs of loop `app`: a failed then a landed attempt, a success, an escalation."""
    import shutil
    from datetime import UTC, datetime, timedelta

    from daemon.people.escalation import write_escalation
    from daemon.state.records import AttemptRecord, RunRecord, RunTrigger, make_run_id
    from daemon.state.store import StateStore

    store = StateStore(home / "state")
    start = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)
    shapes = [  # (outcome, landed, checks of each attempt)
        ("succeeded", True, [False, True]),
        ("succeeded", False, [True]),
        ("escalated", False, [True]),
    ]
    ids = []
    for i, (outcome, landed, checks) in enumerate(shapes):
        started = start + timedelta(hours=i)
        attempts = [
            AttemptRecord(n=n, started=started, checks_passed=ok, summary="Fixed it.")
            for n, ok in enumerate(checks, 1)
        ]
        run = RunRecord(
            id=make_run_id("app", started, i),
            loop="app",
            task="Fix the bug.",
            trigger=RunTrigger(kind="schedule"),
            started=started,
            finished=started + timedelta(minutes=10),
            outcome=outcome,
            attempts=attempts,
            phase="idle",
            landed=landed,
        )
        store.save_run(run)
        for attempt in attempts:
            case = "windowed-empty--good" if attempt.checks_passed else "windowed-empty--partial"
            shutil.copytree(
                SHIPPED / case, store.attempt_dir(run.id, attempt.n), dirs_exist_ok=True
            )
        if outcome == "escalated":
            write_escalation(store, run, started + timedelta(minutes=11))
        ids.append(run.id)
    return ids


def test_the_home_record_labels_attempts_by_what_happened_to_them(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    """Failed checks: bad; landed and the next run green: good; a person's verdict: as said."""
    model_server.default = verdict(9)
    home = home_for(tmp_path, model_server)
    _, _, escalated = _record(home)
    done = loopd(home, "escalations", "resolve", escalated, "--verdict", "bad")
    assert done.returncode == 0, done.stderr
    [figures] = calibrate_json(home, "--home-record")["models"]
    # Bad: the landed run's failed first attempt and the escalated attempt; good: the landed.
    assert figures["cases"] == 3
    assert figures["false_pass_rate"] == 1.0 and figures["false_pass_ci"] == pytest.approx(
        list(wilson(2, 2))
    )
    assert figures["false_fail_rate"] == 0.0 and figures["false_fail_ci"] == pytest.approx(
        list(wilson(0, 1))
    )
    kept = tomllib.loads((home / "state" / "calibration" / "critic-model.toml").read_text())
    assert kept["source"] == "home record" and kept["bad_cases"] == 2
