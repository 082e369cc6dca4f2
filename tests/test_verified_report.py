"""Issue 20, item 2: `loopd report` shows "verified correct" beside the judge's calibration."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from daemon.clock import utc_now
from daemon.state.calibration import Calibration, save_calibration
from daemon.state.records import AttemptRecord, RunRecord, RunTrigger, make_run_id
from daemon.state.store import StateStore
from tests.helpers import loopd, make_home


def _home(tmp_path: Path, calibrated: bool) -> Path:
    """A run whose first attempt the judge failed and whose second passed; a calibration."""
    home = make_home(
        tmp_path / "home",
        '[verifier]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "critic-model"\n',
    )
    store = StateStore(home / "state")
    started = utc_now() - timedelta(hours=1)
    attempts = [
        AttemptRecord(n=1, started=started, checks_passed=True, judged=True, score=3),
        AttemptRecord(n=2, started=started, checks_passed=True, judged=True, score=9),
    ]
    store.save_run(
        RunRecord(
            id=make_run_id("app", started),
            loop="app",
            task="Fix the bug.",
            trigger=RunTrigger(kind="schedule"),
            started=started,
            finished=started + timedelta(minutes=5),
            outcome="succeeded",
            attempts=attempts,
            phase="idle",
        )
    )
    if calibrated:
        save_calibration(
            home / "state",
            Calibration(
                model="critic-model",
                measured=datetime(2026, 11, 30, tzinfo=UTC),
                source="shipped",
                threshold=7,
                cases=70,
                bad_cases=60,
                good_cases=10,
                false_pass_rate=0.25,
                false_pass_ci=[0.1, 0.5],
                false_fail_rate=0.0,
                false_fail_ci=[0.0, 0.3],
                agreement_with_checks=0.8,
                order_disagreement=0.1,
                latency_ms_mean=12.0,
                tokens=1000,
            ),
        )
    return home


def test_the_report_puts_the_judges_false_pass_rate_beside_verified_attempts(
    tmp_path: Path,
) -> None:
    home = _home(tmp_path, calibrated=True)
    data = json.loads(loopd(home, "report", "--json").stdout)
    verified = data["verified"]
    assert verified["verified"] == 1 and verified["caught"] == 1
    assert verified["judge"] == "critic-model" and verified["false_pass_rate"] == 0.25
    # Slipped bad attempts ~ r / (1 - r) x caught: 1.0 at r = 0.5, 0.11 at r = 0.1.
    assert verified["correct"] == [0.0, 0.9]
    text = loopd(home, "report").stdout
    assert "Verified correct: 1 attempt(s)" in " ".join(text.split())
    page = tmp_path / "report.html"
    done = loopd(home, "report", "--html", str(page))
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    assert "<h2>Verified correct</h2>" in html and "25% (10%-50%) for critic-model" in html


def test_without_a_calibration_the_report_says_so(tmp_path: Path) -> None:
    home = _home(tmp_path, calibrated=False)
    data = json.loads(loopd(home, "report", "--json").stdout)
    assert data["verified"]["false_pass_rate"] is None and data["verified"]["correct"] == []
    [written] = (home / "state" / "reports").glob("report-*.md")
    assert "has no calibration (`loopd calibrate`)" in written.read_text()
