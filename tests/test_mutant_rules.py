"""Tests that kill mutants of the trigger evaluator and the rule verifier that the other
tests let live (bench/mutation.py): a rule's scope, the "rests on nothing" guard."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from daemon.config import VerifierConfig
from daemon.rules.evaluator import (
    JUDGE_SYSTEM,
    JudgeCache,
    Selection,
    _cosine,
    in_scope,
    render_rules,
    select_rules,
)
from daemon.rules.library import RuleLibrary
from daemon.rules.rulefile import Evidence, Rule, Scope
from daemon.rules.verifier import (
    candidate_from_file,
    generic_advice,
    is_duplicate,
    verify_candidate,
)
from daemon.rules.verifyprompt import relatedness, similarity
from daemon.state.events import EventLog, iso
from tests.test_rules_verifier import NOW, RUN, candidate, make_attempt


def scoped(**scope: Any) -> Rule:
    return Rule(rule="r", why="w", how_to_apply="h", scope=Scope(**scope))


# -- scope ---------------------------------------------------------------------------------------


def test_one_changed_path_in_scope_is_enough() -> None:
    rule = scoped(paths=["db/**"])
    # A task that touches the database and the docs is a database task all the same.
    assert in_scope(rule, "app", ["docs/x.md", "db/m/0001.sql"])
    assert in_scope(rule, "app", ["db/m/0001.sql", "docs/x.md"])
    assert not in_scope(rule, "app", ["docs/x.md", "src/a.py"])


def test_any_of_the_scopes_globs_admits_a_path() -> None:
    rule = scoped(paths=["db/**", "migrations/**"])
    assert in_scope(rule, "app", ["migrations/0002.py"])
    assert in_scope(rule, "app", ["db/schema.sql"])
    assert not in_scope(rule, "app", ["src/a.py"])


def test_no_known_paths_cannot_exclude_a_rule_and_no_scope_paths_admit_all() -> None:
    assert in_scope(scoped(paths=["db/**"]), "app", [])
    assert in_scope(scoped(), "app", ["src/a.py"])


def test_loops_are_globs_and_no_loop_given_is_not_looked_at() -> None:
    rule = scoped(loops=["api*", "web"])
    assert in_scope(rule, "api-v2", [])
    assert in_scope(rule, "web", [])
    assert not in_scope(rule, "webapp", [])
    assert not in_scope(rule, "API", [])  # case counts
    assert in_scope(rule, "", [])
    assert in_scope(scoped(loops=["x", "*"]), "anything", [])
    assert in_scope(scoped(loops=[]), "anything", [])


def test_repos_compare_resolved_and_none_given_is_not_looked_at(tmp_path: Path) -> None:
    real = tmp_path / "repo"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    rule = scoped(repos=[str(tmp_path / "other"), str(tmp_path / "link")])
    assert in_scope(rule, "app", [], str(real))
    assert in_scope(rule, "app", [], str(real) + "/")
    assert not in_scope(rule, "app", [], str(tmp_path / "elsewhere"))
    assert in_scope(rule, "app", [], None)
    assert in_scope(scoped(), "app", [], str(tmp_path / "elsewhere"))


# -- the verifier's "rests on nothing" -----------------------------------------------------------


@pytest.fixture
def setting(tmp_path: Path) -> dict[str, Any]:
    state = tmp_path / "state"
    return {
        "library": RuleLibrary(tmp_path / "rules"),
        "attempt": make_attempt(state),
        "state": state,
        "events": EventLog(state / "events.jsonl"),
        "cfg": VerifierConfig(base_url="http://127.0.0.1:9/v1", model="fake-verifier"),
    }


def verify(setting: dict[str, Any], rule: Rule, **kw: Any):  # noqa: ANN201
    return verify_candidate(
        setting["library"],
        rule,
        setting["attempt"],
        None,
        setting["cfg"],
        setting["events"],
        NOW,
        state_root=setting["state"],
        use_model=False,
        **kw,
    )


NOTHING = "the rule rests on nothing in the evidence"


def test_a_rule_that_claims_nothing_and_cites_nothing_is_rejected(
    setting: dict[str, Any],
) -> None:
    rule = candidate(
        rule="Take line numbers from `grep -n`, never from `grep -c`.",
        why="Counting is not locating.",
        evidence=[],
    )
    result = verify(setting, rule)
    assert result.decision == "rejected"
    assert NOTHING in result.reasons[0]
    stored = setting["library"].get(result.rule.id)
    assert stored.status == "rejected" and NOTHING in stored.rule.reason


def test_a_why_quoting_the_evidence_is_enough_ground(setting: dict[str, Any]) -> None:
    rule = candidate(
        rule="Take line numbers from `grep -n`, never from `grep -c`.",
        why="The agent took what `grep -c TODO app.py` printed for a line number.",
        evidence=[],
    )
    result = verify(setting, rule)
    assert result.decision == "accepted", result.reasons


def test_a_cited_quote_is_enough_ground_without_claims(setting: dict[str, Any]) -> None:
    rule = candidate(
        rule="Take line numbers from `grep -n`, never from `grep -c`.",
        why="Counting is not locating.",
    )
    result = verify(setting, rule)
    assert result.decision == "accepted", result.reasons
    assert [e.quote for e in result.rule.evidence] == ["grep -c TODO app.py"]


# -- the verifier's steps, word for word ---------------------------------------------------------


class Model:
    """Answers rule_verification with `reply`, recording each prompt."""

    model = "fake-verifier"

    def __init__(self, reply: dict[str, Any]) -> None:
        self.reply = reply
        self.prompts: list[str] = []

    def structured(self, name, reply, system, user, *, timeout=None):  # noqa: ANN001, ANN201
        assert name == "rule_verification" and "grounded: true only when" in system
        self.prompts.append(user)
        return reply.model_validate(self.reply)


def stamped(setting: dict[str, Any]) -> None:
    """Every event the verifier wrote carries the time it was given and the run's names."""
    events = setting["events"].read()
    assert events and all(e["ts"] == iso(NOW) for e in events), events
    assert all((e["loop"], e["run"]) == ("review", "r1") for e in events), events


AGREES = {"grounded": True, "unsupported": [], "contradicts": [], "reason": "supported"}


def verify_with(setting: dict[str, Any], rule: Rule, model: Any, **kw: Any):  # noqa: ANN201
    return verify_candidate(
        setting["library"],
        rule,
        setting["attempt"],
        model,
        setting["cfg"],
        setting["events"],
        NOW,
        state_root=setting["state"],
        loop="review",
        run="r1",
        **kw,
    )


def test_an_accepted_rule_is_filed_with_its_events_and_reasons(setting: dict[str, Any]) -> None:
    model = Model(AGREES)
    result = verify_with(setting, candidate(severity="escalate"), model)
    assert result.accepted and result.decision == "accepted" and result.model_called
    assert result.status == "trial" and result.path is not None and result.path.exists()
    assert result.reasons == [
        "severity 'escalate' lowered to 'remind': only a person raises it "
        "(loopd rules promote ID --severity)",
        "grounded, specific, new, model agrees",
    ]
    proposed, accepted = setting["events"].read()
    assert proposed["type"] == "rule_proposed" and proposed["loop"] == "review"
    assert proposed["run"] == "r1" and proposed["kind"] == "failure"
    assert proposed["text"] == candidate().rule
    assert accepted["type"] == "rule_accepted" and accepted["rule"] == result.rule.id
    assert (accepted["loop"], accepted["run"], accepted["to"]) == ("review", "r1", "trial")
    assert accepted["kind"] == "failure"
    assert accepted["verified_by"] == ["grounding", "duplicates", "model:fake-verifier"]
    stamped(setting)
    as_dict = result.to_dict()
    assert as_dict == {
        "decision": "accepted",
        "id": result.rule.id,
        "status": "trial",
        "path": str(result.path),
        "reasons": result.reasons,
        "duplicate_of": None,
        "contradicts": [],
        "missing": [],
        "model_called": True,
        "verified_by": ["grounding", "duplicates", "model:fake-verifier"],
    }


def test_without_the_model_the_reason_does_not_claim_its_agreement(
    setting: dict[str, Any],
) -> None:
    result = verify(setting, candidate())
    assert result.reasons == ["grounded, specific, new"] and not result.model_called
    assert result.rule.verified_by == ["grounding", "duplicates"]
    # A client given but not to be used is not called either.
    model = Model(AGREES)
    assert verify_with(setting, candidate(rule="Use `grep -n` for lines."), model, use_model=False)
    assert model.prompts == []


def test_a_learned_rule_starts_fresh_whatever_the_candidate_says(setting: dict[str, Any]) -> None:
    created = NOW.replace(year=2025)
    bold = candidate(
        severity="refuse",
        fired=9,
        helped=5,
        harmed=2,
        confidence=0.9,
        created=created,
        reason="old",
        verified_by=["model:x"],
    )
    rule = verify(setting, bold).rule
    assert (rule.severity, rule.fired, rule.helped, rule.harmed) == ("remind", 0, 0, 0)
    assert rule.confidence == 0.5 and rule.reason == "" and rule.created == created
    assert rule.expires is not None and rule.expires > created
    dated = verify(setting, candidate(rule="Use `grep -n` for lines.", expires=NOW)).rule
    assert dated.expires == NOW and dated.created == NOW


def test_a_dry_run_rejects_without_filing_or_events(setting: dict[str, Any]) -> None:
    result = verify(setting, candidate(why="Line 42 of app.py.", evidence=[]), write=False)
    assert result.decision == "rejected" and not result.accepted
    assert result.status is None and result.path is None
    assert result.missing and "'42'" in result.missing[0]
    assert setting["library"].scan() == [] and setting["events"].read() == []


def test_a_rejection_files_the_first_reason_and_the_event_all_of_them(
    setting: dict[str, Any],
) -> None:
    rule = candidate(trigger_patterns=["(?<!x)a", "(?<!y)b"])
    result = verify_with(setting, rule, None)
    assert len(result.reasons) == 2
    stored = setting["library"].get(result.rule.id)
    assert stored.status == "rejected" and stored.rule.reason == result.reasons[0]
    assert result.path == stored.path and result.status == "rejected"
    (event,) = [e for e in setting["events"].read() if e["type"] == "rule_rejected"]
    assert event["reason"] == "; ".join(result.reasons)
    assert (event["loop"], event["run"], event["rule"]) == ("review", "r1", result.rule.id)
    assert event["kind"] == "failure"
    stamped(setting)


def test_an_empty_evidence_folder_rejects_the_candidate(
    setting: dict[str, Any], tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = verify_candidate(
        setting["library"], candidate(), empty, None, setting["cfg"], None, NOW, use_model=False
    )
    assert result.decision == "rejected"
    assert result.reasons == [f"no evidence files in {empty}"]


def test_the_model_may_only_name_related_rules_as_contradicted(setting: dict[str, Any]) -> None:
    library: RuleLibrary = setting["library"]
    related = library.add(
        candidate(
            rule="Cite line numbers as printed by `grep -c` so counts agree.",
            why="Earlier reviews used `grep -c`.",
            evidence=[],
        ),
        "active",
    ).rule.id
    model = Model({**AGREES, "contradicts": ["r-9999-unknown", related], "reason": "opposite"})
    result = verify_with(setting, candidate(), model)
    assert result.decision == "rejected" and result.model_called
    assert result.contradicts == [related]
    assert result.reasons == [f"contradicts {related}: opposite"]
    stamped(setting)
    prompt = model.prompts[0]
    assert f"- {related} (active): Cite line numbers" in prompt
    assert "How to apply: " in prompt and "# Related rules" in prompt
    unknown_only = Model({**AGREES, "contradicts": ["r-9999-unknown"]})
    assert verify_with(setting, candidate(rule="Use `grep -n` for lines."), unknown_only).accepted


def test_a_model_that_finds_no_ground_rejects_saying_what(setting: dict[str, Any]) -> None:
    model = Model({**AGREES, "grounded": False, "unsupported": ["17", "app.py"], "reason": "r"})
    result = verify_with(setting, candidate(), model)
    assert result.decision == "rejected" and result.model_called
    assert result.reasons == ["model: not grounded: 17; app.py"]
    assert result.missing == ["17", "app.py"]
    stamped(setting)
    bare = Model({**AGREES, "grounded": False, "reason": "nothing supports it"})
    again = verify_with(setting, candidate(rule="Use `grep -n` for lines."), bare)
    assert again.reasons == ["model: not grounded: nothing supports it"]


def test_the_prompt_holds_the_candidate_and_its_evidence(setting: dict[str, Any]) -> None:
    model = Model(AGREES)
    verify_with(setting, candidate(), model)
    prompt = model.prompts[0]
    rule = candidate()
    assert prompt.startswith("# Candidate\n")
    assert f"**Rule:** {rule.rule}\n\n**Why:** {rule.why}\n\n" in prompt
    assert f"**How to apply:** {rule.how_to_apply}\n\n# Evidence\n" in prompt
    evidence = f"- runs/{RUN}/attempt-1/transcript.jsonl line 2: 'grep -c TODO app.py'"
    assert evidence in prompt
    assert "# Related rules\n(none)" in prompt
    # The transcript around the cited line, numbered; the checks' log, numbered.
    transcript = (setting["attempt"] / "transcript.jsonl").read_text().split("\n")
    numbered = "\n".join(f"{n}: {line}" for n, line in enumerate(transcript[:5], 1))
    assert f"--- transcript.jsonl around line 2\n{numbered}\n\n--- checks.log" in prompt
    checks = (setting["attempt"] / "checks.log").read_text().split("\n")
    numbered = "\n".join(f"{n}: {line}" for n, line in enumerate(checks, 1))
    assert f"--- checks.log (last {len(checks)} lines)\n{numbered}\n" in prompt


def test_a_merge_adds_only_new_evidence_and_caps_the_confidence(setting: dict[str, Any]) -> None:
    library: RuleLibrary = setting["library"]
    cited = Evidence(
        path=f"runs/{RUN}/attempt-1/transcript.jsonl", line=2, quote="grep -c TODO app.py"
    )
    old = Evidence(path="runs/old/attempt-1/checks.log", line=3, quote="old")
    existing = library.add(
        candidate(confidence=0.9, evidence=[old, cited], scope=Scope(repos=["/a", "/b"])),
        "active",
    )
    newer = candidate(
        evidence=[Evidence(path="transcript.jsonl", line=1, quote="grep -c TODO app.py")],
        scope=Scope(repos=["/b", "/c"]),
    )
    result = verify_with(setting, newer, None)
    assert result.decision == "duplicate" and result.accepted
    assert result.duplicate_of == existing.rule.id and result.status == "active"
    assert result.reasons == [f"near-duplicate of {existing.rule.id}: its confidence rises to 0.95"]
    after = library.get(existing.rule.id).rule
    assert after.confidence == 0.95 and after.evidence == [old, cited]
    assert after.scope.repos == ["/a", "/b", "/c"]
    (merged,) = [e for e in setting["events"].read() if e["type"] == "rule_merged"]
    assert (merged["rule"], merged["loop"], merged["run"]) == (existing.rule.id, "review", "r1")
    assert merged["confidence"] == 0.95 and merged["evidence_added"] == 0
    stamped(setting)


def test_a_merge_keeps_an_unscoped_rule_unscoped_and_counts_new_evidence(
    setting: dict[str, Any],
) -> None:
    library: RuleLibrary = setting["library"]
    existing = library.add(candidate(confidence=0.5, evidence=[]), "active")
    result = verify_with(setting, candidate(scope=Scope(repos=["/c"])), None)
    after = library.get(existing.rule.id).rule
    assert after.scope.repos == [] and after.confidence == 0.6
    assert result.reasons == [f"near-duplicate of {existing.rule.id}: its confidence rises to 0.60"]
    (merged,) = [e for e in setting["events"].read() if e["type"] == "rule_merged"]
    assert merged["evidence_added"] == 1
    dry = verify_with(setting, candidate(), None, write=False)
    assert dry.decision == "duplicate" and dry.status is None and dry.path is None
    assert library.get(existing.rule.id).rule.confidence == 0.6


def rule_of(text: str, intent: str = "") -> Rule:
    return Rule(rule=text, why="w", how_to_apply="h", trigger_intent=intent)


def test_half_the_words_shared_makes_a_duplicate() -> None:
    # Words of 3+ characters, stop words out, a plural's s dropped: {migration, test}.
    two = rule_of("Always the migrations, then tests")
    assert similarity(two, rule_of("migration test")) == 1.0
    four = rule_of("migrations tests fixtures loaded")
    assert similarity(four, two) == 0.5 and is_duplicate(four, two)
    five = rule_of("migrations tests fixtures loaded seeds")
    assert similarity(five, two) == 0.4 and not is_duplicate(five, two)
    # A code span counts as one word, whole; words under 3 characters do not count.
    assert similarity(rule_of("Always `make check`"), rule_of("`make check` first")) == 0.5
    assert similarity(rule_of("go db ui"), rule_of("go db ui")) == 0.0
    # "runs" keeps its s (4 characters), "tests" loses it.
    assert similarity(rule_of("runs"), rule_of("run")) == 0.0


def test_nearly_the_same_characters_make_a_duplicate() -> None:
    a = rule_of("Run `pytest -x` in api/ before pushing.")
    b = rule_of("run `pytest -x`  in api/ before pushing!")
    assert is_duplicate(a, b)
    # Few words in common, nearly every character: the same rule with another version.
    bump = rule_of("Bump the version to 1.2.3 in setup.cfg")
    other = rule_of("Bump the version to 1.2.4 in setup.py")
    assert similarity(bump, other) < 0.5 and is_duplicate(bump, other)
    assert not is_duplicate(a, rule_of("Run `npm test` in web/ after merging."))


def test_relatedness_is_the_rule_or_half_the_intents_overlap() -> None:
    a = rule_of("Use `grep -n` for lines", "reviews citing line numbers")
    b = rule_of("Quote the file", "reviews citing line numbers")
    assert relatedness(a, b) == 0.5
    c = rule_of("Use `grep -n` for lines", "database migrations")
    assert relatedness(a, c) == 1.0


def test_generic_advice_says_the_phrase_or_nothing() -> None:
    rule = Rule(rule="Be careful.", why="w", how_to_apply="Read the task carefully.")
    assert generic_advice(rule) == (
        "generic advice ('Be careful'): the rule names no file, command, identifier, number or "
        "quoted text to act on; a rule must name the specific thing to do"
    )
    how = Rule(rule="Think.", why="w", how_to_apply="Double-check it.")
    assert generic_advice(how).startswith("generic advice ('Double-check'): ")
    vague = Rule(rule="Do better.", why="w", how_to_apply="Somehow.")
    assert generic_advice(vague).startswith("generic advice: the rule names no file")
    named = Rule(rule="Be careful with `make deploy`.", why="w", how_to_apply="h")
    assert generic_advice(named) is None
    in_how = Rule(rule="Be careful.", why="w", how_to_apply="Run `make lint` first.")
    assert generic_advice(in_how) is None


def test_evidence_outside_the_state_folder_keeps_an_absolute_path(
    setting: dict[str, Any], tmp_path: Path
) -> None:
    result = verify_candidate(
        setting["library"],
        candidate(),
        setting["attempt"],
        None,
        setting["cfg"],
        None,
        NOW,
        state_root=tmp_path / "elsewhere",
        use_model=False,
        write=False,
    )
    base = setting["attempt"].resolve()
    assert [e.path for e in result.rule.evidence] == [f"{base}/transcript.jsonl"]
    no_root = verify_candidate(
        setting["library"], candidate(), setting["attempt"], None, setting["cfg"], None, NOW,
        use_model=False, write=False,
    )  # fmt: skip
    assert [e.path for e in no_root.rule.evidence] == [f"{base}/transcript.jsonl"]
    # Already under the folder: kept as cited.
    cited = f"runs/{RUN}/attempt-1/transcript.jsonl"
    again = verify(setting, candidate(evidence=[Evidence(path=cited, line=1, quote="grep -c")]))
    assert [e.path for e in again.rule.evidence] == [cited]


# -- the trigger evaluator -----------------------------------------------------------------------


class Judge:
    """trigger_matches answered by `pick`; embeddings from `vectors` (by text), recorded."""

    model = "fake"

    def __init__(self, pick: Any = lambda ids: [], vectors: dict[str, list[float]] | None = None):  # noqa: ANN401
        self.pick = pick
        self.vectors = vectors or {}
        self.prompts: list[str] = []
        self.embedded: list[list[str]] = []

    def structured(self, name, reply, system, user, *, timeout=None):  # noqa: ANN001, ANN201
        assert name == "trigger_matches" and system == JUDGE_SYSTEM
        self.prompts.append(user)
        ids = re.findall(r"^- (r-\d{4}-[a-z0-9-]+):", user, re.MULTILINE)
        return reply.model_validate({"matches": self.pick(ids)})

    def embeddings(self, texts, *, timeout=None):  # noqa: ANN001, ANN201
        self.embedded.append(list(texts))
        return [self.vectors.get(t, [0.0, 0.0]) for t in texts]


def live_rule(library: RuleLibrary, slug: str, intent: str, patterns: list[str], **kw: Any) -> str:
    status = kw.pop("status", "active")
    rule = Rule(
        trigger_intent=intent,
        trigger_patterns=patterns,
        rule=f"Rule about {slug}.",
        why="Because.",
        how_to_apply=f"Run `make {slug}`.",
        **kw,
    )
    return library.add(rule, status).rule.id


EVAL_CFG = VerifierConfig(base_url="http://127.0.0.1:9/v1", model="m", judge_candidates=40)


def choose(library: RuleLibrary, task: str, client: Any = None, **kw: Any) -> Selection:
    return select_rules(
        library,
        task,
        kw.pop("loop", "app"),
        kw.pop("paths", []),
        client,
        kw.pop("cfg", EVAL_CFG),
        kw.pop("events", None),
        NOW,
        run=kw.pop("run", None),
        cache=kw.pop("cache", JudgeCache()),
    )


def test_cosine_is_the_angle_and_a_zero_vector_scores_zero() -> None:
    assert _cosine([1.0, 0.0], [1.0, 0.0]) == 1.0
    assert _cosine([1.0, 0.0], [0.0, 1.0]) == 0.0
    assert _cosine([1.0, 2.0], [2.0, 1.0]) == pytest.approx(0.8)
    assert _cosine([3.0, 4.0], [6.0, 8.0]) == pytest.approx(1.0)
    assert _cosine([0.0, 0.0], [1.0, 1.0]) == 0.0
    assert _cosine([1.0, 1.0], [0.0, 0.0]) == 0.0
    assert _cosine([2.0, 0.0], [-3.0, 0.0]) == pytest.approx(-1.0)


def test_embeddings_choose_the_candidates_nearest_the_task(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path)
    far = live_rule(library, "far", "Far intent", [])
    near = live_rule(library, "near", "Near intent", [])
    nearer = live_rule(library, "nearer", "Nearer intent", [])
    vectors = {
        "Fix the refund": [1.0, 0.0],
        "Far intent": [0.0, 1.0],
        "Near intent": [1.0, 1.0],
        "Nearer intent": [4.0, 1.0],
    }
    judge = Judge(pick=lambda ids: ids, vectors=vectors)
    cfg = EVAL_CFG.model_copy(update={"judge_candidates": 2, "embeddings_model": "e"})
    cache = JudgeCache()
    sel = choose(library, "Fix the refund", judge, cfg=cfg, cache=cache)
    assert sel.candidates == [nearer, near] and far not in sel.ids
    assert judge.embedded == [["Fix the refund", "Far intent", "Near intent", "Nearer intent"]]
    # The rules' vectors are kept: the next task embeds only itself.
    choose(library, "Fix the refund", judge, cfg=cfg, cache=cache)
    assert judge.embedded[1] == ["Fix the refund"]


def test_vectors_of_another_length_are_compared_on_what_they_share(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path)
    near = live_rule(library, "near", "Near intent", [])
    live_rule(library, "far", "Far intent", [])
    vectors = {"Fix it": [1.0, 0.0, 5.0], "Near intent": [1.0, 0.0], "Far intent": [0.0, 1.0]}
    judge = Judge(pick=lambda ids: ids, vectors=vectors)
    cfg = EVAL_CFG.model_copy(update={"judge_candidates": 1, "embeddings_model": "e"})
    sel = choose(library, "Fix it", judge, cfg=cfg)
    assert sel.judge == "called" and sel.candidates == [near]


def test_word_overlap_ties_go_to_the_more_confident_rule_then_the_first(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path)
    low = live_rule(library, "low", "Refund invoices", [], confidence=0.3)
    high = live_rule(library, "high", "Refund payments", [], confidence=0.9)
    both = live_rule(library, "both", "Refund invoices payments", [], confidence=0.1)
    none = live_rule(library, "none", "Deploy servers", [], confidence=0.95)
    judge = Judge()
    cfg = EVAL_CFG.model_copy(update={"judge_candidates": 3})
    sel = choose(library, "Refund the invoices and payments", judge, cfg=cfg)
    assert sel.candidates == [both, high, low] and none not in sel.candidates
    two = EVAL_CFG.model_copy(update={"judge_candidates": 2})
    assert choose(library, "Refund the invoices and payments", judge, cfg=two).candidates == [
        both,
        high,
    ]


def test_what_the_judge_is_asked(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path)
    rid = live_rule(library, "docs", "Documentation updates", [])
    judge = Judge()
    paths = [f"docs/{n}.md" for n in range(60)]
    choose(library, "Update the docs", judge, loop="site", paths=paths)
    changed = "\n".join(paths[:50])
    assert judge.prompts == [
        "# Task\n<task>\nUpdate the docs\n</task>\n\n# Loop\nsite\n\n"
        f"# Changed paths\n{changed}\n\n# Rules (id: intent)\n"
        f"- {rid}: Documentation updates (rule: Rule about docs.)"
    ]
    choose(library, "Update the docs again", judge, loop="site")
    assert "# Changed paths\n(none known)\n\n" in judge.prompts[1]


def test_a_failing_judge_says_why_in_its_event(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path / "rules")
    live_rule(library, "a", "Anything", [])
    live_rule(library, "b", "Anything else", [])

    class Broken(Judge):
        def structured(self, name, reply, system, user, *, timeout=None):  # noqa: ANN001, ANN201
            raise RuntimeError("x" * 600)

    events = EventLog(tmp_path / "events.jsonl")
    sel = choose(library, "Do it", Broken(), events=events, run="r1", loop="site")
    assert sel.judge == "failed: " + "x" * 600 and sel.ids == []
    (failed,) = [e for e in events.read() if e["type"] == "rule_judge_failed"]
    assert failed["reason"] == "x" * 500 and failed["candidates"] == 2
    assert (failed["loop"], failed["run"]) == ("site", "r1")


def test_each_fired_rule_is_an_event_and_a_dict(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path / "rules")
    lint = live_rule(library, "lint", "Linting", [r"(?i)\blint"], severity="escalate")
    docs = live_rule(library, "docs", "Documentation", [], status="trial")
    events = EventLog(tmp_path / "events.jsonl")
    judge = Judge(pick=lambda ids: [docs])
    sel = choose(library, "Run the lint on the docs", judge, events=events, run="r1", loop="web")
    fired = [e for e in events.read() if e["type"] == "rule_fired"]
    assert [(e["rule"], e["why"], e["detail"], e["severity"]) for e in fired] == [
        (lint, "pattern", r"(?i)\blint", "escalate"),
        (docs, "model", "model", "remind"),
    ]
    assert all((e["loop"], e["run"]) == ("web", "r1") for e in fired)
    assert sel.to_dict() == {
        "fired": [
            {
                "id": lint,
                "status": "active",
                "severity": "escalate",
                "why": "pattern",
                "detail": r"(?i)\blint",
                "rule": "Rule about lint.",
                "how_to_apply": "Run `make lint`.",
            },
            {
                "id": docs,
                "status": "trial",
                "severity": "remind",
                "why": "model",
                "detail": "model",
                "rule": "Rule about docs.",
                "how_to_apply": "Run `make docs`.",
            },
        ],
        "judge": "called",
        "model_calls": 1,
        "candidates": [docs],
        "refuse": [],
        "escalate": [lint],
    }
    assert [r.id for r in sel.reminders] == [docs]


def test_no_model_or_no_candidates_allowed_means_no_call(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path)
    live_rule(library, "docs", "Documentation", [])
    live_rule(library, "blank", "   ", [])
    assert choose(library, "Update the docs").judge == "no model"
    judge = Judge()
    none = EVAL_CFG.model_copy(update={"judge_candidates": 0})
    assert choose(library, "Update the docs", judge, cfg=none).judge == "no model"
    assert judge.prompts == []
    only_blank = RuleLibrary(tmp_path / "blank")
    live_rule(only_blank, "blank", "   ", [])
    assert choose(only_blank, "Update the docs", judge).judge == "not needed"


def test_a_pattern_re2_cannot_run_is_reported_once(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path / "rules")
    # Unique to this call: the report is once per process, which may run the tests again.
    pattern = f"(?<!{uuid.uuid4().hex})x"
    rid = live_rule(library, "bad", "Bad", [pattern, r"(?i)\bdeploy"])
    events = EventLog(tmp_path / "events.jsonl")
    first = choose(library, "deploy it", events=events, run="r1", loop="web")
    assert first.ids == [rid]  # its other pattern still fires
    choose(library, "deploy it", events=events)
    (skipped,) = [e for e in events.read() if e["type"] == "rule_pattern_skipped"]
    assert (skipped["rule"], skipped["pattern"], skipped["loop"]) == (rid, pattern, "web")
    assert skipped["run"] == "r1" and skipped["reason"]


def test_changed_paths_are_matched_each_on_its_own_line(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path)
    rid = live_rule(library, "sql", "SQL", [r"(?m)^db/.*\.sql$"])
    assert choose(library, "Fix it", paths=["src/a.py", "db/m/1.sql"]).ids == [rid]
    assert choose(library, "Fix it").ids == []


def test_rendering_lists_each_rule_with_how_to_apply() -> None:
    rules = [
        Rule(rule="One.", why="w", how_to_apply="Do one."),
        Rule(rule="Two.", why="w", how_to_apply="Do two."),
    ]
    assert (
        render_rules(rules) == "- One.\n  How to apply: Do one.\n- Two.\n  How to apply: Do two.\n"
    )


def test_the_model_sees_the_eight_most_related_rules_most_related_first(
    setting: dict[str, Any],
) -> None:
    library: RuleLibrary = setting["library"]
    related = []
    for n in range(10):
        # The candidate's intent and 9 - n words of their own: the later, the more related.
        own = " ".join(f"word{n}x{k}" for k in range(9 - n))
        intent = f"Reviews that cite specific line numbers of a source file {own}"
        related.append(
            library.add(
                candidate(rule=f"Rule {n} about `tool{n}`.", trigger_intent=intent.strip()),
                "active",
            ).rule.id
        )
    library.add(candidate(rule="Deploy with `make ship`.", trigger_intent="Deploys"), "active")
    model = Model(AGREES)
    verify_with(setting, candidate(), model)
    listed = re.findall(r"^- (r-\d{4}-[a-z0-9-]+) \(active\)", model.prompts[0], re.MULTILINE)
    assert len(listed) == 8 and "make ship" not in model.prompts[0]
    assert listed == list(reversed(related))[:8]


def test_the_excerpts_skip_what_they_cannot_place_and_keep_the_checks_tail(
    setting: dict[str, Any],
) -> None:
    attempt: Path = setting["attempt"]
    (attempt / "checks.log").write_text("".join(f"line {n}\n" for n in range(1, 61)))
    model = Model(AGREES)
    verify_with(setting, candidate(), model)
    prompt = model.prompts[0]
    tail = "\n".join(f"{n}: line {n}" for n in range(22, 62)).replace("61: line 61", "61: ")
    assert f"--- checks.log (last 40 lines)\n{tail}" in prompt
    assert "21: line 21" not in prompt


def test_the_excerpts_are_cut_to_four_characters_a_token(setting: dict[str, Any]) -> None:
    attempt: Path = setting["attempt"]
    (attempt / "checks.log").write_text("x" * 10000 + "\n")
    cfg = VerifierConfig(base_url="http://127.0.0.1:9/v1", model="m", evidence_tokens=1000)
    model = Model(AGREES)
    verify_candidate(
        setting["library"], candidate(), attempt, model, cfg, None, NOW,
        state_root=setting["state"], write=False,
    )  # fmt: skip
    prompt = model.prompts[0]
    # 4,000 characters, the transcript's lines first: what is left of them is the log's.
    assert "x" * 2000 in prompt and "x" * 4000 not in prompt


def test_a_candidate_file_may_lack_its_id_and_counters(tmp_path: Path) -> None:
    path = tmp_path / "candidate.md"
    path.write_text(
        '+++\nkind = "failure"\ntrigger_intent = "Reviews"\n+++\n'
        "**Rule:** Use `grep -n`.\n\n**Why:** Counts are not lines.\n\n"
        "**How to apply:** Open the file.\n"
    )
    rule = candidate_from_file(path)
    assert rule.id == "" and rule.rule == "Use `grep -n`." and rule.fired == 0
