"""Every way text leaves a run goes through redaction, provider rules included.

Tokens only the provider rules know (a Stripe live key, a GitLab token, an age key) go into
the judge's request, a notification, an escalation file, a rule file, the trigger cache and
`loopd redact`; none of them may come out.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from daemon.config import NotifyConfig
from daemon.model.schemas import CriticVerdict
from daemon.people.escalation import write_escalation
from daemon.people.notify import Notifications
from daemon.rules.judge_cache import JudgeCache
from daemon.rules.library import RuleLibrary
from daemon.rules.rulefile import Evidence, Rule, parse_rule
from daemon.state.store import StateStore
from tests.helpers import ROOT, loopd
from tests.model_server import ScriptedModelServer
from tests.test_escalations import make_run
from tests.test_model_client import GOOD, make_client

NOW = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)
STRIPE = "sk_live_" + "51OuEMLAlTWGaDypq4P5cuDHbuKeG4tAGPYH"
GITLAB = "glpat-" + "Zq3vX9kL2mN8pR4tW7yB"
AGE = "AGE-SECRET-KEY-1" + "0GH7YQ7SWV77EFWFCQY2ZNP37CMEUGHXZGLDSMN6CK6W4P325XD3J8Y779"
TOKENS = (STRIPE, GITLAB, AGE)
TEXT = f"Deployed with {STRIPE}; the runner used {GITLAB}, the backup {AGE}."


def clean(text: str) -> bool:
    return not any(token in text for token in TOKENS) and "[REDACTED:" in text


def test_the_judges_request_is_redacted(model_server: ScriptedModelServer) -> None:
    model_server.add({"json": GOOD})
    make_client(model_server).structured("critic_verdict", CriticVerdict, TEXT, TEXT)
    assert clean(model_server.log_text())


def test_a_notification_is_redacted(tmp_path: Path) -> None:
    script = "import json, sys; open(sys.argv[1], 'w').write(json.dumps(sys.argv[2:]))"
    out = tmp_path / "seen.json"
    store = StateStore(tmp_path / "state")
    notes = Notifications(
        NotifyConfig(command=[sys.executable, "-c", script, str(out)]), store.events
    )
    notes.notify("escalated", TEXT, {"loop": "app", "run": "R1", "reason": TEXT}, NOW)
    assert notes.drain(30)
    assert clean(out.read_text())


def test_an_escalation_file_is_redacted(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    run = make_run(store, "app", NOW - timedelta(hours=1), [dict(checks_passed=False)], task=TEXT)
    assert clean(write_escalation(store, run, NOW).read_text())


def test_a_rule_file_is_redacted_and_its_patterns_kept(tmp_path: Path) -> None:
    pattern = r"(?i)deploy\s+with\s+sk_live_\w+"
    rule = Rule(
        kind="failure",
        trigger_patterns=[pattern],
        source_task=TEXT,
        evidence=[Evidence(path="runs/R1/attempt-1/transcript.jsonl", line=3, quote=TEXT)],
        rule=f"Never paste {GITLAB} into a commit.",
        why=f"The attempt printed {STRIPE}.",
        how_to_apply=f"Read keys from the environment, not {AGE}.",
    )
    stored = RuleLibrary(tmp_path / "rules").add(rule, "trial")
    text = stored.path.read_text()
    assert clean(text)
    assert parse_rule(text).trigger_patterns == [pattern]


def test_the_trigger_cache_file_keeps_tasks_redacted(tmp_path: Path) -> None:
    rule = Rule(id="r-0001-x", rule="Do x.", why="Because y.", how_to_apply="Then z.")
    cache = JudgeCache(tmp_path / "trigger-matches.json")
    cache.put(TEXT, [(rule, True)])
    assert clean((tmp_path / "trigger-matches.json").read_text())
    assert cache.get(TEXT, rule) is True  # in memory, the task as asked


def test_loopd_redact_prints_what_it_would_keep(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    control = "commit 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39\ntests/test_x.py::test_y[param-1]\n"
    log.write_text(f"{TEXT}\n{control}")
    proc = loopd(tmp_path, "redact", str(log))
    assert proc.returncode == 0, proc.stderr
    assert clean(proc.stdout) and proc.stdout.endswith(control)
    assert "3 secret(s) replaced" in proc.stderr
    piped = subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", "redact", "-", "--quiet"],
        input=TEXT,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert piped.returncode == 0 and clean(piped.stdout) and piped.stderr == ""
    missing = loopd(tmp_path, "redact", str(tmp_path / "nope.log"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr
