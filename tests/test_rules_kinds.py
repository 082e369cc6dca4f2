"""The kinds a run teaches besides its post-mortems: decisions.md, the agent's notes, skills.

A real home and state folder with one run's files; the verifier model is the scripted fake
of tests/test_rules_verifier.py (the end-to-end test, tests/test_four_kinds_e2e.py, uses the
scripted model server).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from daemon.model.client import ModelUnavailable
from daemon.rules.decisionlog import Decision, parse_decisions, read_decisions
from daemon.rules.kinds import MAX_NOTES, NoVerifier, learn_decisions, submit_candidate
from daemon.rules.library import RuleLibrary
from daemon.rules.postmortem import kind_guidance, propose_rule
from daemon.rules.rulefile import Rule, kind_problem
from daemon.rules.runevidence import checks_in_log, run_evidence
from daemon.state.events import EventLog
from daemon.state.records import AttemptRecord, RunRecord, RunTrigger
from daemon.state.store import StateStore
from tests.helpers import make_home
from tests.test_learning_e2e import LEARNED
from tests.test_rules_verifier import FakeModel

NOW = datetime(2026, 12, 4, 21, 0, tzinfo=UTC)
RUN = "20261204T200000Z-calc-0a1b"
AGREES = {"grounded": True, "unsupported": [], "contradicts": [], "reason": "grounded"}
TASK = "Make check.py pass."


def line(**event: object) -> str:
    return json.dumps({"ts": "2026-12-04T20:00:01Z", "stream": "stdout", **event}) + "\n"


def make_run(tmp_path: Path, verifier: bool = True) -> tuple[Path, Path]:
    """A home holding one run of loop calc: its record, an attempt's files, evidence.jsonl."""
    config = '[verifier]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n' if verifier else ""
    home = make_home(tmp_path / "home", config)
    store = StateStore(home / "state")
    store.save_run(
        RunRecord(
            id=RUN,
            loop="calc",
            task=TASK,
            trigger=RunTrigger(kind="manual", reason="test", ts=NOW),
            started=NOW,
            attempts=[AttemptRecord(n=1, started=NOW)],
            repo="/src/calc",
        )
    )
    run_dir = store.run_dir(RUN)
    attempt = store.attempt_dir(RUN, 1)
    (attempt / "transcript.jsonl").write_text(
        line(type="text", text="I believe `MAX_RETRIES = 7` is set in settings.py.")
        + line(type="tool_call", tool="shell", arguments={"command": "grep -n TIMEOUT conf.py"})
        + line(type="tool_result", tool="shell", output="3:TIMEOUT_SECONDS = 45")
        + line(
            type="tool_call",
            tool="mcp__loopd__note_knowledge",
            arguments={"text": "`MAX_RETRIES = 7` in settings.py"},
        )
    )
    (attempt / "checks.log").write_text(
        "$ python3 check.py\nAssertionError: add(2, 3) gave -1\n[exit 1 after 0.2s]\n\n"
    )
    (attempt / "diff.patch").write_text("")
    (attempt / "prompt.md").write_text(f"# Task\n{TASK}\n")
    records = [
        {"claim": "tests pass", "command": "make quick", "exit_code": 0, "output_tail": "4 passed"},
        {"claim": "lint ok", "command": "make lint", "exit_code": 2, "refuted": True},
    ]
    # As the desk writes them (state/agentrecords.py: EvidenceLine).
    written = [{"ts": "2026-12-04T20:00:05Z", "attempt": 1, "refuted": False, **r} for r in records]
    (run_dir / "evidence.jsonl").write_text("".join(json.dumps(r) + "\n" for r in written))
    return home, run_dir


# -- decisions.md --------------------------------------------------------------------------------


def test_decisions_md_is_read_tolerantly_and_written_back_the_same() -> None:
    text = (
        "# Decisions of the run\nsome preamble\n\n"
        "## Use `httpx` for HTTP\nWhy: `requests` has no\n  async client.\n"
        "Alternatives: aiohttp\n\n"
        "## Keep legacy/ frozen\n**Why:** the finance team owns it\nRecorded: 2026-12-04\n"
        "stray line of an unknown key\n\n"
        "## \n"  # an empty title is no decision
        "## Split the parser\n- Alternatives: one module\n"
    )
    found = parse_decisions(text)
    assert [(d.title, d.why, d.alternatives, d.line) for d in found] == [
        ("Use `httpx` for HTTP", "`requests` has no async client.", "aiohttp", 4),
        ("Keep legacy/ frozen", "the finance team owns it", "", 9),
        ("Split the parser", "", "one module", 15),
    ]
    again = parse_decisions("".join(d.markdown() for d in found))
    assert [(d.title, d.why, d.alternatives) for d in again] == [
        (d.title, d.why, d.alternatives) for d in found
    ]


def test_a_run_without_decisions_md_has_no_decisions_and_learns_none(tmp_path: Path) -> None:
    home, run_dir = make_run(tmp_path)
    assert read_decisions(run_dir) == []
    library = RuleLibrary(home / "rules")
    model = FakeModel()
    verdicts = learn_decisions(
        library, model, _cfg(home), None, home / "state", RUN, "calc", TASK, "/src/calc", NOW
    )
    assert verdicts == [] and model.calls == []


def test_a_decision_is_grounded_in_what_the_run_saw_not_in_decisions_md(tmp_path: Path) -> None:
    home, run_dir = make_run(tmp_path)
    (run_dir / "decisions.md").write_text(
        Decision(
            title="Read TIMEOUT_SECONDS from conf.py, never hard-code it",
            why="`grep -n TIMEOUT conf.py` printed `3:TIMEOUT_SECONDS = 45`.",
            alternatives="An environment variable.",
        ).markdown()
        + Decision(title="Set MAX_RETRIES in settings.py", why="settings.py holds it.").markdown()
    )
    library = RuleLibrary(home / "rules")
    model = FakeModel(rule_verification=[AGREES])
    events = EventLog(home / "state" / "events.jsonl")
    first, second = learn_decisions(
        library, model, _cfg(home), events, home / "state", RUN, "calc", TASK, "/src/calc", NOW
    )
    assert first.decision == "accepted" and first.status == "trial"
    rule = first.rule
    assert rule.kind == "decision" and rule.scope.repos == ["/src/calc"]
    assert rule.source_run == RUN and r"(?i)TIMEOUT_SECONDS" in rule.trigger_patterns
    assert rule.evidence[0].path == f"runs/{RUN}/decisions.md" and rule.evidence[0].line == 1
    assert "weighed and not taken: An environment variable." in rule.how_to_apply
    # The second names what only the agent's own words hold: settings.py is nowhere observed.
    assert second.decision == "rejected" and "settings.py" in second.reasons[0]
    # A finish taken up again proposes neither a second time.
    again = learn_decisions(
        library, model, _cfg(home), events, home / "state", RUN, "calc", TASK, "/src/calc", NOW
    )
    assert again == [] and len(model.calls) == 1


def test_a_decision_waits_when_the_model_is_down(tmp_path: Path) -> None:
    home, run_dir = make_run(tmp_path)
    (run_dir / "decisions.md").write_text(
        Decision(title="Read TIMEOUT_SECONDS from conf.py", why="conf.py holds it.").markdown()
    )
    library = RuleLibrary(home / "rules")
    model = FakeModel(rule_verification=[ModelUnavailable("connection refused")])
    with pytest.raises(ModelUnavailable):
        learn_decisions(
            library, model, _cfg(home), None, home / "state", RUN, "calc", TASK, "/src/calc", NOW
        )
    assert library.scan() == []  # nothing filed with a check skipped


# -- the agent's notes ---------------------------------------------------------------------------


def _cfg(home: Path):  # noqa: ANN202 - VerifierConfig
    from daemon.config import load_home

    return load_home(home).daemon.verifier


def test_a_note_is_grounded_in_what_the_agent_saw_never_in_its_own_words(tmp_path: Path) -> None:
    home, run_dir = make_run(tmp_path)
    evidence = run_evidence(run_dir)
    assert "TIMEOUT_SECONDS = 45" in evidence.text and "make quick" in evidence.text
    assert "MAX_RETRIES" not in evidence.text  # the agent's text and its note are left out
    assert "tests pass" not in evidence.text  # an evidence line's claim is the agent's too
    said = submit_candidate(
        home,
        RUN,
        "knowledge",
        "Retries are capped by `MAX_RETRIES = 7` in settings.py.",
        "The agent found `MAX_RETRIES = 7` in settings.py.",
        ["settings.py"],
        NOW,
        client=FakeModel(),
    )
    assert said.decision == "rejected" and said.status == "rejected"
    assert "MAX_RETRIES = 7" in said.reasons[0]
    model = FakeModel(rule_verification=[AGREES])
    seen = submit_candidate(
        home,
        RUN,
        "knowledge",
        "The timeout is `TIMEOUT_SECONDS` in conf.py, not a constant in the code.",
        "`grep -n TIMEOUT conf.py` printed `3:TIMEOUT_SECONDS = 45`.",
        ["conf.py"],
        NOW,
        client=model,
    )
    # The model reads the evidence around each entry and the last attempt's checks, not the
    # agent's own note.
    [(_, asked)] = model.calls
    assert "--- attempt-1/checks.log (last " in asked and "gave -1" in asked
    assert "3:TIMEOUT_SECONDS = 45" in asked and "MAX_RETRIES" not in asked
    assert seen.decision == "accepted" and seen.status == "trial", seen.reasons
    rule = seen.rule
    assert rule.kind == "knowledge" and rule.source_run == RUN and rule.source_task == TASK
    assert rule.scope.repos == ["/src/calc"] and rule.trigger_patterns == [r"(?i)\bconf\.py\b"]
    assert rule.verified_by == ["grounding", "duplicates", "model:fake-verifier"]
    [entry] = [e for e in rule.evidence if "TIMEOUT_SECONDS = 45" in e.quote]
    assert entry.path == f"runs/{RUN}/attempt-1/transcript.jsonl" and entry.line == 3


def test_a_skill_carries_the_passing_command_it_names_and_nothing_else_will_do(
    tmp_path: Path,
) -> None:
    home, _ = make_run(tmp_path)
    why = "`python3 check.py` failed with `add(2, 3) gave -1`."
    for text, problem in (
        ("Run `make lint` before committing calc.py.", "a skill needs the command"),
        ("Fix calc.py with care, then commit.", "a skill needs the command"),
    ):
        verdict = submit_candidate(
            home, RUN, "skill", text, why, [], NOW, client=FakeModel()
        )  # `make lint` failed (refuted): it verifies nothing
        assert verdict.decision == "rejected" and problem in verdict.reasons[0], verdict.reasons
    verdict = submit_candidate(
        home,
        RUN,
        "skill",
        "Run `make quick` after editing conf.py: it runs the fast tests.",
        why,
        ["conf.py"],
        NOW,
        client=FakeModel(rule_verification=[AGREES]),
    )
    assert verdict.decision == "accepted", verdict.reasons
    proof = verdict.rule.verified_with
    assert proof is not None and (proof.command, proof.exit_code) == ("make quick", 0)
    assert proof.output == "4 passed" and proof.where == f"runs/{RUN}/evidence.jsonl"
    assert "then run `make quick` to confirm it worked" in verdict.rule.how_to_apply
    stored = RuleLibrary(home / "rules").get(verdict.rule.id)
    assert stored.status == "trial" and stored.rule.verified_with == proof


def test_a_bad_note_is_refused_before_anything_is_filed(tmp_path: Path) -> None:
    home, _ = make_run(tmp_path)
    before = sorted((home / "rules").rglob("*.md"))
    for kind, paths in (("failure", []), ("knowledge", ["../etc/passwd"]), ("skill", ["/abs"])):
        with pytest.raises(ValidationError):
            submit_candidate(home, RUN, kind, "A fact of eight.", "Because of eight.", paths, NOW)
    with pytest.raises(FileNotFoundError):
        submit_candidate(home, "20261204T200000Z-none-0000", "knowledge", "x" * 9, "y" * 9, [], NOW)
    assert sorted((home / "rules").rglob("*.md")) == before


def test_without_a_verifier_nothing_is_learned_unless_asked_without_the_model(
    tmp_path: Path,
) -> None:
    home, _ = make_run(tmp_path, verifier=False)
    note = (
        "knowledge",
        "The timeout is `TIMEOUT_SECONDS` in conf.py.",
        "`grep -n TIMEOUT conf.py` printed `3:TIMEOUT_SECONDS = 45`.",
        ["conf.py"],
    )
    with pytest.raises(NoVerifier, match=r"Fix: set \[verifier\]"):
        submit_candidate(home, RUN, *note, NOW)
    verdict = submit_candidate(home, RUN, *note, NOW, use_model=False)
    assert verdict.decision == "accepted" and verdict.rule.verified_by == [
        "grounding",
        "duplicates",
    ]


def test_a_run_notes_at_most_max_notes_candidates(tmp_path: Path) -> None:
    home, _ = make_run(tmp_path)
    for i in range(MAX_NOTES):
        submit_candidate(
            home, RUN, "knowledge", f"Fact number {i} of conf.py.", f"It said {i}.", [], NOW,
            use_model=False,
        )  # fmt: skip
    with pytest.raises(ValueError, match="no more are taken"):
        submit_candidate(home, RUN, "knowledge", "One fact too many.", "Flooding.", [], NOW)
    notes = (home / "state" / "runs" / RUN / "notes.jsonl").read_text().splitlines()
    assert [json.loads(n)["text"] for n in notes] == [
        f"Fact number {i} of conf.py." for i in range(MAX_NOTES)
    ]


# -- the post-mortem may propose any kind ------------------------------------------------------


def test_the_post_mortem_may_propose_a_skill_verified_by_a_passing_command(
    tmp_path: Path,
) -> None:
    home, run_dir = make_run(tmp_path)
    attempt = run_dir / "attempt-1"
    skill = {**LEARNED, "kind": "skill", "rule": "Run `make quick` after each edit of calc.py."}
    model = FakeModel(postmortem_rule=[skill, {**skill, "rule": "Edit calc.py and stop."}])
    rule = propose_rule(model, attempt, "", {}, TASK, "calc", RUN)
    assert rule.kind == "skill" and rule.verified_with is not None
    assert rule.verified_with.command == "make quick" and kind_problem(rule) is None
    assert "- `make quick`" in model.calls[0][1] and "`make lint`" not in model.calls[0][1]
    # A skill that names no passing command is a failure lesson.
    rule = propose_rule(model, attempt, "", {}, TASK, "calc", RUN)
    assert rule.kind == "failure" and rule.verified_with is None
    assert kind_guidance(None, "", []).endswith('write kind "knowledge" or "failure".')


def test_checks_log_is_read_as_loopd_writes_it() -> None:
    log = (
        "$ python3 check.py\nok\n[exit 0 after 0.1s]\n\n"
        "$ pytest -q\n$ not a command line\n[timed out after 600.0s]\n\n"
        "$ make\n[exit None after 1.0s]\n"
    )
    found = [(c.command, c.exit_code, c.output, c.line) for c in checks_in_log(log)]
    assert found == [
        ("python3 check.py", 0, "ok", 1),
        ("pytest -q", None, "$ not a command line", 5),
        ("make", None, "", 9),
    ]


def test_a_hand_written_skill_without_its_command_still_reads() -> None:
    rule = Rule(kind="skill", rule="Run `make`.", why="It worked.", how_to_apply="Run it.")
    assert "verified_with" in (kind_problem(rule) or "")
