"""The trigger evaluator: lexical stage, one model call for the rest, timeout, cache, rendering."""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from daemon.config import VerifierConfig
from daemon.model.client import ModelClient, ModelUnavailable
from daemon.rules.evaluator import (
    JudgeCache,
    PatternIndex,
    render_rules,
    required_literal,
    select_rules,
)
from daemon.rules.library import RuleLibrary, StoredRule
from daemon.rules.rulefile import Rule, Scope
from daemon.state.events import EventLog

NOW = datetime(2026, 11, 29, 2, 14, tzinfo=UTC)
CFG = VerifierConfig(base_url="http://127.0.0.1:9/v1", model="m", judge_candidates=40)


class FakeJudge:
    """Answers trigger_matches from a function of the rule ids it was asked about."""

    model = "fake"

    def __init__(self, pick=lambda ids: [], fail: Exception | None = None) -> None:  # noqa: ANN001
        self.pick = pick
        self.fail = fail
        self.calls: list[list[str]] = []

    def structured(self, name, reply, system, user, *, timeout=None):  # noqa: ANN001, ANN201
        assert name == "trigger_matches" and timeout == CFG.judge_timeout.total_seconds()
        ids = re.findall(r"^- (r-\d{4}-[a-z0-9-]+):", user, re.MULTILINE)
        self.calls.append(ids)
        if self.fail:
            raise self.fail
        return reply.model_validate({"matches": self.pick(ids)})

    def embeddings(self, texts, *, timeout=None):  # noqa: ANN001, ANN201
        raise AssertionError("no embeddings_model is set")


def add(library: RuleLibrary, slug: str, intent: str, patterns: list[str], **kw: Any) -> str:
    status = kw.pop("status", "active")
    rule = Rule(
        id="",
        trigger_intent=intent,
        trigger_patterns=patterns,
        rule=f"Rule about {slug}: run `make {slug}`.",
        why="Because.",
        how_to_apply=f"Run `make {slug}` first.",
        **kw,
    )
    return library.add(rule, status).rule.id


def select(library: RuleLibrary, task: str, client: Any = None, **kw: Any):  # noqa: ANN201
    return select_rules(
        library,
        task,
        kw.pop("loop", "app"),
        kw.pop("paths", []),
        client,
        kw.pop("cfg", CFG),
        kw.pop("events", None),
        NOW,
        cache=kw.pop("cache", JudgeCache()),
    )


def test_required_literals() -> None:
    assert required_literal(r"(?i)\bline\s+\d+") == "line"
    assert required_literal(r"(?i)\breview") == "review"
    assert required_literal(r"(migrat(e|ion))+s?") == "migrat"
    assert required_literal(r"(?i)\b(find|list)\b") == ""
    assert required_literal(r"a?bcd*") == "bc"


def test_the_index_agrees_with_running_every_regex() -> None:
    rng = random.Random(7)
    vocab = ["line", "review", "migration", "grep", "test", "docs", "sql", "api", "db"]
    shapes = [
        r"(?i)\b{w}\b",
        r"{w}s?",
        r"(?i)(?:{w}|{v})",
        r"\b{w}\s+\d+",
        r"^{w}",
        r"(?i)x?{w}[a-z]*",
        r"{w}.{{0,5}}{v}",
    ]
    stored = []
    for n in range(300):
        pattern = rng.choice(shapes).format(w=rng.choice(vocab), v=rng.choice(vocab))
        rule = Rule(
            id=f"r-{n + 1:04d}-x", trigger_patterns=[pattern], rule="r", why="w", how_to_apply="h"
        )
        stored.append(StoredRule(rule, "active", Path(f"{n}.md")))
    index = PatternIndex(stored)
    for _ in range(200):
        text = " ".join(rng.choice(vocab + ["Line", "REVIEW", "7", "of"]) for _ in range(6))
        expected = {i for i, s in enumerate(stored) if re.search(s.rule.trigger_patterns[0], text)}
        assert set(index.matches(text)) == expected, text


def test_patterns_fire_within_their_scope(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path)
    everywhere = add(library, "mig", "Database migrations", [r"(?i)\bmigration"])
    api_only = add(library, "api", "API work", [r"(?i)\bendpoint"], scope=Scope(loops=["api*"]))
    db_paths = add(library, "sql", "SQL files", [r"\.sql\b"], scope=Scope(paths=["db/**"]))
    sel = select(library, "Write a migration for the users endpoint", loop="web")
    assert sel.ids == [everywhere] and sel.fired[0].why == "pattern"
    assert sel.fired[0].detail == r"(?i)\bmigration"
    assert select(library, "Add the orders endpoint", loop="api-v2").ids == [api_only]
    assert select(library, "Fix it", paths=["db/m/0001.sql"]).ids == [db_paths]
    assert select(library, "Fix it", paths=["src/0001.sql"]).ids == []


def test_one_model_call_decides_the_rest_and_says_why(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path)
    lexical = add(library, "lint", "Linting", [r"(?i)\blint"])
    intents = [add(library, f"n{i}", f"Tasks about topic {i}", [rf"zzz{i}qqq"]) for i in range(5)]
    judge = FakeJudge(pick=lambda ids: [intents[3]])
    events = EventLog(tmp_path / "events.jsonl")
    sel = select(library, "Run the lint and tidy topic 3", judge, events=events)
    assert len(judge.calls) == 1 and sorted(judge.calls[0]) == sorted(intents)
    assert [(f.rule.id, f.why) for f in sel.fired] == [(lexical, "pattern"), (intents[3], "model")]
    assert sel.model_calls == 1 and sel.judge == "called"
    fired = [(e["rule"], e["why"]) for e in events.read() if e["type"] == "rule_fired"]
    assert fired == [(lexical, "pattern"), (intents[3], "model")]


def test_at_most_judge_candidates_go_to_the_model_chosen_by_word_overlap(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path)
    for i in range(30):
        add(library, f"n{i}", f"Unrelated chores number {i}", [])
    wanted = add(library, "pay", "Payment refunds and invoices", [])
    judge = FakeJudge(pick=lambda ids: [wanted] if wanted in ids else [])
    cfg = CFG.model_copy(update={"judge_candidates": 5})
    sel = select(library, "Handle refunds for invoices", judge, cfg=cfg)
    assert len(judge.calls) == 1 and len(judge.calls[0]) == 5 and wanted in judge.calls[0]
    assert sel.ids == [wanted]


def test_a_timeout_leaves_the_lexical_matches_and_an_event(
    tmp_path: Path, model_server: Any
) -> None:
    library = RuleLibrary(tmp_path / "rules")
    lexical = add(library, "lint", "Linting", [r"(?i)\blint"])
    add(library, "other", "Anything else at all", [])
    model_server.add({"hang": 3, "json": {"matches": []}}, name="trigger_matches")
    cfg = VerifierConfig(base_url=model_server.base_url, model="m", judge_timeout="300ms")
    events = EventLog(tmp_path / "events.jsonl")
    sel = select(library, "Run the lint", ModelClient(cfg, environ={}), cfg=cfg, events=events)
    assert sel.ids == [lexical] and sel.judge.startswith("failed")
    failed = [e for e in events.read() if e["type"] == "rule_judge_failed"]
    assert len(failed) == 1 and failed[0]["loop"] == "app"


def test_an_error_also_means_lexical_only(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path)
    add(library, "other", "Anything else", [])
    judge = FakeJudge(fail=ModelUnavailable("down"))
    assert select(library, "Do it", judge).ids == []
    assert len(judge.calls) == 1


def test_a_cached_answer_makes_no_call_until_the_rule_changes(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path / "rules")
    rid = add(library, "docs", "Documentation updates", [])
    judge = FakeJudge(pick=lambda ids: ids)
    cache = JudgeCache(tmp_path / "cache.json")
    first = select(library, "Update the docs", judge, cache=cache)
    second = select(library, "Update   the docs", judge, cache=JudgeCache(tmp_path / "cache.json"))
    assert first.ids == second.ids == [rid] and len(judge.calls) == 1
    assert second.judge == "cached" and second.fired[0].detail == "model (cached)"
    stored = library.get(rid)
    counted = Rule.model_validate({**stored.rule.model_dump(), "fired": 3})
    library.save(stored, counted)  # counters are not part of the version
    select(library, "Update the docs", judge, cache=cache)
    assert len(judge.calls) == 1
    edited = Rule.model_validate({**counted.model_dump(), "trigger_intent": "Docs and READMEs"})
    library.save(library.get(rid), edited)
    select(library, "Update the docs", judge, cache=cache)
    assert len(judge.calls) == 2


def test_deleting_a_rule_file_stops_it_firing(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path)
    rid = add(library, "lint", "Linting", [r"(?i)\blint"])
    assert select(library, "lint it").ids == [rid]
    library.get(rid).path.unlink()
    assert select(library, "lint it").ids == []


def test_expired_and_non_live_rules_do_not_fire(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path)
    add(library, "old", "x", [r"lint"], expires=datetime(2026, 1, 1, tzinfo=UTC))
    add(library, "rej", "x", [r"lint"], status="rejected")
    live = add(library, "new", "x", [r"lint"], status="trial")
    assert select(library, "lint").ids == [live]


def test_refuse_and_escalate_are_reported_and_rendering_keeps_rule_and_how(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path)
    stop = add(library, "prod", "Production deploys", [r"(?i)\bdeploy"], severity="refuse")
    ask = add(library, "keys", "Key rotation", [r"(?i)\brotate"], severity="escalate")
    sel = select(library, "Deploy and rotate keys")
    assert [f.rule.id for f in sel.refuse] == [stop]
    assert [f.rule.id for f in sel.escalate] == [ask]
    text = render_rules(sel.rules)
    assert "- Rule about prod: run `make prod`.\n  How to apply: Run `make prod` first." in text
    assert render_rules([]) == ""
