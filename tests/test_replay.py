"""`loopd replay`: where rules would have fired on recorded runs, their breadth, no model call;
and the promotion path, which keeps a too broad rule in trial."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from daemon.rules.library import RuleLibrary, StoredRule
from daemon.rules.replay import MIN_BREADTH_RUNS, RecordedTask, replay
from daemon.rules.rulefile import Rule
from daemon.state.records import AttemptRecord, RunRecord, RunTrigger, make_run_id
from daemon.state.store import StateStore
from tests.helpers import events, loopd, make_home, make_repo

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import replay as bench  # noqa: E402


def test_replay_on_200_recorded_runs_reports_breadth_without_a_model_call(
    tmp_path: Path, model_server: Any
) -> None:
    expected = bench.build_home(tmp_path, datetime.now(UTC), runs=200, rules=50)
    home = tmp_path / "home"
    # A verifier is configured: replay must still not ask it anything.
    config = (home / "loopd.toml").read_text()
    (home / "loopd.toml").write_text(
        f'[verifier]\nbase_url = "{model_server.base_url}"\nmodel = "m"\n\n{config}'
    )
    proc = loopd(home, "replay", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert model_server.requests == []
    assert data["runs"] == 200 and len(data["rules"]) == 50
    learned = next(r for r in data["rules"] if r["id"] == bench.LEARNED)
    assert learned["fired"] == expected["fired"]
    assert learned["unrelated_runs"] == expected["unrelated"] == 160
    assert learned["unrelated_fired"] == expected["unrelated_fired"]
    assert learned["breadth"] == expected["unrelated_fired"] / expected["unrelated"]
    assert learned["too_broad"] and "over [rules] max_breadth 0.3" in learned["reason"]
    cached = [f for f in learned["firings"] if f["why"] == "model (cached)"]
    assert len(cached) == expected["cached"] > 0 and {f["loop"] for f in cached} == {"cli"}
    assert sum(learned["outcomes"].values()) == learned["fired"]
    assert set(learned["outcomes"]) == {"succeeded", "escalated"}
    assert all(r["fired"] == 0 for r in data["rules"] if r["id"] != bench.LEARNED)

    # One rule by id: too broad, so the check fails (exit 1); on screen, the same figures.
    proc = loopd(home, "replay", "--rule", bench.LEARNED)
    assert proc.returncode == 1, proc.stderr
    assert f"{bench.LEARNED} (trial, failure): fires on {expected['fired']} of 200 runs" in (
        proc.stdout
    )
    assert "too broad" in proc.stdout
    # A candidate file whose pattern only its own loop's tasks match: breadth 0, exit 0.
    candidate = tmp_path / "candidate.md"
    candidate.write_text(
        "+++\nkind = \"knowledge\"\ntrigger_patterns = ['(?i)test_calc']\n"
        'source_run = "20261101T000000Z-app-0000"\n+++\n'
        "**Rule:** Run `pytest tests/test_calc.py`.\n\n**Why:** It failed.\n\n"
        "**How to apply:** Run it.\n"
    )
    proc = loopd(home, "replay", "--rule", str(candidate), "--json")
    assert proc.returncode == 0, proc.stderr
    [only] = json.loads(proc.stdout)["rules"]
    assert only["id"] == "(candidate)" and only["fired"] == 40 and only["breadth"] == 0.0
    # A shorter window replays fewer runs.
    proc = loopd(home, "replay", "--since", "2d", "--json")
    assert 0 < json.loads(proc.stdout)["runs"] < 30
    assert model_server.requests == []


def test_breadth_ignores_repos_but_honours_loops_and_needs_enough_runs() -> None:
    rule = bench.learned_rule("/somewhere/else")  # scoped to another repository
    tasks = [RecordedTask(f"r{i}", "docs", "succeeded", "Fix the tests.") for i in range(9)]
    [few] = replay([StoredRule(rule, "trial", Path("x"))], tasks)
    assert few.breadth == 1.0 and not few.too_broad  # nine runs of other loops say too little
    tasks.append(RecordedTask("r9", "docs", "escalated", "Fix the tests."))
    assert len(tasks) == MIN_BREADTH_RUNS
    [enough] = replay([StoredRule(rule, "trial", Path("x"))], tasks)
    assert enough.too_broad and enough.outcomes == {"succeeded": 9, "escalated": 1}
    only_app = Rule.model_validate({**rule.model_dump(), "scope": {"loops": ["app"]}})
    [scoped] = replay([StoredRule(only_app, "trial", Path("x"))], tasks)
    assert scoped.firings == [] and scoped.breadth == 0.0


AGENT = "import pathlib\npathlib.Path('README.md').write_text('fixed')\nprint('fixed README.md')\n"


def test_the_promotion_path_keeps_a_too_broad_rule_in_trial(
    tmp_path: Path, model_server: Any
) -> None:
    """Followed in a passing run of another loop, but firing on most runs of other loops."""
    critic = {"score": 9, "verdict": "ok", "unsupported_claims": [], "feedback": ""}
    model_server.add(*[{"json": critic}] * 2, name="critic_verdict")
    repo = make_repo(tmp_path / "repo", {"README.md": "broken\n"})
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    config = (
        f'[verifier]\nbase_url = "{model_server.base_url}"\nmodel = "critic"\n'
        'timeout = "20s"\n\n[agents.fixer]\nadapter = "command"\n'
        f'command = ["{sys.executable}", "{agent}"]\n'
    )
    loop = (
        f'repo = "{repo}"\ntask = "Fix the README."\nagent = "fixer"\n'
        'done_when = ["grep -q fixed README.md"]\nmax_attempts = 1\nmax_nudges = 0\n'
    )
    home = make_home(tmp_path / "home", config, {"docs": loop})
    library = RuleLibrary(home / "rules")
    rid = library.add(
        Rule(
            trigger_intent="Editing the README",
            trigger_patterns=[r"(?i)\breadme\b"],
            source_run=make_run_id("app", datetime(2026, 11, 1, tzinfo=UTC)),
            source_task="Write the install section of README.md.",
            rule="Keep README.md's first line a title.",
            why="A person decided so.",
            how_to_apply="Check it.",
        ),
        "trial",
    ).rule.id
    store = StateStore(home / "state")
    now = datetime.now(UTC)
    for i in range(MIN_BREADTH_RUNS + 2):  # earlier runs of other loops, all about the README
        started = now - timedelta(hours=i + 1)
        store.save_run(
            RunRecord(
                id=make_run_id("web", started, i),
                loop="web",
                task="Proofread the README and the site.",
                trigger=RunTrigger(kind="schedule"),
                started=started,
                finished=started,
                outcome="succeeded",
                attempts=[AttemptRecord(n=1, started=started)],
                phase="idle",
            )
        )
    proc = loopd(home, "once", "docs", timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    stored = library.get(rid)
    assert stored.status == "trial", stored.rule.reason
    assert stored.rule.reason.startswith("too broad: fires on 13 of 13 runs of other loops")
    assert (stored.rule.fired, stored.rule.helped) == (1, 1)
    [held] = [e for e in events(home) if e["type"] == "rule_held"]
    assert held["rule"] == rid and held["run"] == run_id
    [critic_call] = model_server.chat_requests("critic_verdict")
    assert f"- {rid}: " in critic_call["messages"][-1]["content"]
