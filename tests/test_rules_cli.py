"""`loopd rules ...` as real subprocesses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from daemon.rules.library import RuleLibrary
from daemon.rules.rulefile import Rule
from tests.helpers import loopd, make_home
from tests.test_rules_verifier import make_attempt

GOOD = """\
+++
kind = "failure"
trigger_intent = "Reviews that cite line numbers"
trigger_patterns = ['(?i)\\bline\\s+numbers?\\b']
evidence = [{ path = "transcript.jsonl", line = 2, quote = "grep -c TODO app.py" }]
+++
**Rule:** Take line numbers from `grep -n` or the file itself, never from `grep -c`.

**Why:** The review cited line 17 of app.py; 17 was what `grep -c TODO app.py` printed.

**How to apply:** Open the file at that line and quote it.
"""


def home_with_rules(tmp_path: Path, config: str = "") -> tuple[Path, RuleLibrary]:
    home = make_home(tmp_path / "home", config)
    library = RuleLibrary(home / "rules")
    library.add(
        Rule(
            trigger_intent="Payment refunds and invoices",
            trigger_patterns=[r"(?i)\binvoices?\b"],
            rule="Run `make billing-test` after touching `billing/`.",
            why="Because.",
            how_to_apply="Run it.",
        ),
        "active",
    )
    return home, library


def test_list_show_and_a_broken_file_warning(tmp_path: Path) -> None:
    home, library = home_with_rules(tmp_path)
    (home / "rules" / "trial" / "r-0009-broken.md").write_text("no front matter\n")
    out = loopd(home, "rules", "list", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["id"] for r in rows] == ["r-0001-run-make-billing-test-after-touching"]
    assert "r-0009-broken.md" in out.stderr and "front matter" in out.stderr
    shown = loopd(home, "rules", "show", rows[0]["id"], "--json")
    assert json.loads(shown.stdout)["status"] == "active"
    assert loopd(home, "rules", "show", "r-0404-nope").returncode == 2


def test_match_by_pattern_needs_no_model(tmp_path: Path) -> None:
    home, _ = home_with_rules(tmp_path)
    out = loopd(home, "rules", "match", "--task", "Send the overdue invoices", "--json")
    data = json.loads(out.stdout)
    assert out.returncode == 0
    assert [(f["id"][:6], f["why"]) for f in data["fired"]] == [("r-0001", "pattern")]
    assert data["model_calls"] == 0


def test_match_finds_an_intent_through_one_model_call(tmp_path: Path, model_server: Any) -> None:
    home, library = home_with_rules(
        tmp_path, f'[verifier]\nbase_url = "{model_server.base_url}"\nmodel = "judge"\n'
    )
    rid = library.scan()[0].rule.id
    model_server.add({"json": {"matches": [rid]}}, name="trigger_matches")
    out = loopd(home, "rules", "match", "--task", "Give the customer her money back")
    assert out.returncode == 0, out.stderr
    assert f"{rid} (active): model" in out.stdout
    assert len(model_server.chat_requests()) == 1
    assert "Payment refunds" in json.dumps(model_server.chat_requests("trigger_matches")[0])
    again = loopd(home, "rules", "match", "--task", "Give the customer her money back", "--json")
    assert json.loads(again.stdout)["judge"] == "cached"
    assert len(model_server.chat_requests()) == 1


def test_verify_accepts_and_rejects_with_exit_codes(tmp_path: Path) -> None:
    home, _ = home_with_rules(tmp_path)
    attempt = make_attempt(home / "state")
    good = tmp_path / "good.md"
    good.write_text(GOOD)
    out = loopd(home, "rules", "verify", str(good), "--evidence", str(attempt), "--no-model")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("accepted -> ") and "/rules/trial/r-0002-" in out.stdout
    bad = tmp_path / "bad.md"
    bad.write_text(GOOD.replace("line 17 of app.py", "line 42 of app.py"))
    out = loopd(home, "rules", "verify", str(bad), "--evidence", str(attempt), "--no-model")
    assert out.returncode == 1 and "rejected" in out.stdout and "'42'" in out.stdout
    events = [json.loads(line) for line in (home / "state" / "events.jsonl").open()]
    assert [e["type"] for e in events] == [
        "rule_proposed",
        "rule_accepted",
        "rule_proposed",
        "rule_rejected",
    ]


def test_promote_sets_severity_and_retire_moves_the_file(tmp_path: Path) -> None:
    home, library = home_with_rules(tmp_path)
    rid = library.scan()[0].rule.id
    library.move(rid, "trial", None, library.get(rid).rule.created or _now())
    out = loopd(home, "rules", "promote", rid, "--severity", "refuse")
    assert out.returncode == 0, out.stderr
    stored = library.get(rid)
    assert stored.status == "active" and stored.rule.severity == "refuse"
    out = loopd(home, "rules", "retire", rid)
    assert out.returncode == 0 and library.get(rid).status == "retired"
    matched = loopd(home, "rules", "match", "--task", "invoices", "--json")
    assert json.loads(matched.stdout)["fired"] == []


def _now():  # noqa: ANN202
    from datetime import UTC, datetime

    return datetime(2026, 11, 29, tzinfo=UTC)
