"""Rule files: parse/dump round-trip, version, the library's reading, ids and moves."""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from daemon.rules.library import RuleLibrary
from daemon.rules.rulefile import Evidence, Rule, RuleFileError, dump_rule, parse_rule
from daemon.state.events import EventLog

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 11, 29, 2, 14, tzinfo=UTC)

EXAMPLE = """\
+++
id = "r-0042-grep-count-is-not-a-line-number"
kind = "failure"  # a failure: a mistake an earlier attempt made, and how to avoid it
severity = "remind"
trigger_intent = "Reviews or edits that cite specific line numbers of a source file"
trigger_patterns = ['(?i)\\bline\\s+\\d+', '(?i)\\breview']
scope = { loops = ["*"], paths = [] }
confidence = 0.5
fired = 0
helped = 0
harmed = 0
idle = 0
created = 2026-11-29T02:14:00Z
expires = 2027-02-27T02:14:00Z
source_run = "20261129T021000Z-review-3f2a"
source_task = "Review app.py and list concrete problems with line numbers."
verified_by = ["grounding", "duplicates", "model:qwen3-30b-a3b-instruct"]
evidence = [{ path = "runs/20261129T021000Z-review-3f2a/attempt-1/transcript.jsonl", \
line = 42, quote = "grep -c TODO app.py -> 17" }]
+++
**Rule:** Take line numbers from `grep -n` or the file itself, never from `grep -c`.

**Why:** The review cited line 17 for a TODO in app.py; 17 was what `grep -c TODO app.py` printed.

**How to apply:** Before naming a line, open the file at that line and quote it.
"""


def make_rule(rule_id: str = "", text: str = "Run `make lint` before `git commit`.", **kw) -> Rule:
    fields = dict(
        id=rule_id,
        trigger_intent="Commits to the repository",
        trigger_patterns=[r"(?i)\bcommit"],
        rule=text,
        why="The checks failed on `make lint`.",
        how_to_apply="Run it and fix what it reports.",
    )
    fields.update(kw)
    return Rule(**fields)


def test_the_design_example_round_trips_byte_for_byte() -> None:
    rule = parse_rule(EXAMPLE)
    assert rule.id == "r-0042-grep-count-is-not-a-line-number"
    assert rule.trigger_patterns == [r"(?i)\bline\s+\d+", r"(?i)\breview"]
    assert rule.evidence[0].line == 42
    assert rule.created == datetime(2026, 11, 29, 2, 14, tzinfo=UTC)
    assert rule.how_to_apply.startswith("Before naming a line")
    assert dump_rule(rule) == EXAMPLE
    assert parse_rule(dump_rule(rule)) == rule


def test_awkward_strings_survive_the_round_trip() -> None:
    rule = make_rule(
        "r-0001-x",
        trigger_intent="quotes ' and \" and \\ and a tab\t",
        evidence=[
            Evidence(path="a/b.log", line=3, quote='it\'s "quoted" \\n'),
            Evidence(path="c.patch", quote="two\nlines"),
        ],
    )
    assert parse_rule(dump_rule(rule)) == rule


def test_version_ignores_the_counters_but_not_the_content() -> None:
    rule = parse_rule(EXAMPLE)
    counted = rule.model_copy(update={"fired": 9, "helped": 4, "harmed": 2, "confidence": 0.9})
    assert counted.version == rule.version
    edited = Rule.model_validate({**rule.model_dump(), "trigger_intent": "Something else"})
    assert edited.version != rule.version


@pytest.mark.parametrize(
    "broken, problem",
    [
        (EXAMPLE.replace("+++\n**Rule", "**Rule"), "closing '+++'"),
        (EXAMPLE.replace('kind = "failure"', 'knd = "failure"'), "knd: unknown key"),
        (EXAMPLE.replace("**Why:**", "**Because:**"), "**Why:**"),
        (EXAMPLE.replace('severity = "remind"', 'severity = "loud"'), "severity"),
    ],
)
def test_broken_files_say_what_is_wrong(broken: str, problem: str) -> None:
    with pytest.raises(RuleFileError) as info:
        parse_rule(broken)
    assert problem in str(info.value)


def test_a_broken_file_is_skipped_with_a_warning_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    library = RuleLibrary(tmp_path)
    good = library.add(make_rule(), "active")
    bad = tmp_path / "trial" / "r-0007-bad.md"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text(
        EXAMPLE.replace("r-0042-grep-count-is-not-a-line-number", "r-0007-bad").replace(
            'kind = "failure"', 'kind = "oops"'
        )
    )
    with caplog.at_level(logging.WARNING, logger="loopd.rules"):
        found = library.scan()
    assert [s.rule.id for s in found] == [good.rule.id]
    assert any(str(bad) in w and "kind" in w for w in library.warnings)
    assert str(bad) in caplog.text


@pytest.mark.parametrize(
    "pattern, why",
    [
        ("(unclosed", "missing ): (unclosed"),
        ("(?=lookahead)review", "invalid perl operator: (?="),
        (r"(\w)\1", "invalid escape sequence: \\1"),
        ("x" * 501, "longer than 500 characters"),
    ],
)
def test_a_pattern_re2_cannot_run_is_skipped_and_the_rule_still_works(
    tmp_path: Path, pattern: str, why: str
) -> None:
    library = RuleLibrary(tmp_path)
    path = tmp_path / "active" / "r-0042-grep-count-is-not-a-line-number.md"
    path.parent.mkdir(parents=True)
    path.write_text(EXAMPLE.replace("'(?i)\\breview'", f"'{pattern}'"))  # TOML literal
    (stored,) = library.scan()
    assert stored.rule.trigger_patterns == [r"(?i)\bline\s+\d+", pattern]
    ((bad, reason),) = stored.pattern_problems
    assert bad == pattern and why in reason
    (warning,) = library.warnings
    assert str(path) in warning and "is skipped" in warning and why in warning


def test_the_starter_rules_load_and_round_trip() -> None:
    library = RuleLibrary(ROOT / "rules")
    active = library.rules(("active",))
    assert library.warnings == []
    ids = {s.rule.id for s in active}
    assert {
        "r-0001-grep-count-is-not-a-line-number",
        "r-0002-a-stub-file-has-nothing-to-review",
        "r-0003-cite-only-lines-that-exist",
    } <= ids
    for stored in active:
        assert stored.rule.trigger_patterns
        assert dump_rule(stored.rule) == stored.path.read_text()


def test_ids_are_allocated_in_order_and_files_named_after_them(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path)
    first = library.add(make_rule(), "trial")
    second = library.add(make_rule(text="Use `ruff format` on `daemon/`."), "rejected")
    assert first.rule.id == "r-0001-run-make-lint-before-git-commit"
    assert second.rule.id.startswith("r-0002-")
    assert first.path == tmp_path / "trial" / f"{first.rule.id}.md"
    assert parse_rule(first.path.read_text()) == first.rule


def test_hand_edits_deletions_and_moves_take_effect_on_the_next_call(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path)
    stored = library.add(make_rule(), "trial")
    assert library.get(stored.rule.id).status == "trial"
    text = stored.path.read_text().replace("Run it and fix", "Run it, then fix")
    stored.path.write_text(text)
    os.utime(stored.path, ns=(1, 1))  # a different mtime even within one clock tick
    assert library.get(stored.rule.id).rule.how_to_apply.startswith("Run it, then fix")
    (tmp_path / "active").mkdir()
    os.rename(stored.path, tmp_path / "active" / stored.path.name)
    assert library.get(stored.rule.id).status == "active"
    (tmp_path / "active" / stored.path.name).unlink()
    assert library.find(stored.rule.id) is None


def test_a_move_is_a_rename_and_an_event(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path / "rules")
    events = EventLog(tmp_path / "events.jsonl")
    stored = library.add(make_rule(), "trial")
    moved = library.move(stored.rule.id, "active", events, NOW, reason="fired elsewhere")
    assert not stored.path.exists() and moved.path.exists()
    assert moved.status == "active" and moved.rule.reason == "fired elsewhere"
    library.move(stored.rule.id, "retired", events, NOW, reason="harmed")
    kinds = [(e["type"], e["rule"], e["from"], e["to"]) for e in events.read()]
    assert kinds == [
        ("rule_promoted", stored.rule.id, "trial", "active"),
        ("rule_demoted", stored.rule.id, "active", "retired"),
    ]


def test_the_same_id_in_two_folders_keeps_one_and_warns(tmp_path: Path) -> None:
    library = RuleLibrary(tmp_path)
    stored = library.add(make_rule(), "active")
    (tmp_path / "trial").mkdir()
    (tmp_path / "trial" / stored.path.name).write_text(stored.path.read_text())
    found = library.scan()
    assert [(s.rule.id, s.status) for s in found] == [(stored.rule.id, "active")]
    assert any("also in" in w for w in library.warnings)


@pytest.mark.parametrize(
    "broken, key, fix",
    [
        (('kind = "failure"', 'knd = "failure"'), "knd", "did you mean `kind`?"),
        (("confidence = 0.5", "confidense = 0.5"), "confidense", "did you mean `confidence`?"),
        (('severity = "remind"', 'severity = "loud"'), "severity", '"remind" | "refuse"'),
        (("fired = 0", "fired = -1"), "fired", "use a number of at least 0, e.g. fired = 0"),
        (("confidence = 0.5", "confidence = 3"), "confidence", "from 0.0 to 1.0"),
        (('kind = "failure"', "kind = ["), "front matter", "strings in double quotes"),
    ],
)
def test_a_broken_rule_file_says_what_to_write(broken: tuple[str, str], key: str, fix: str) -> None:
    with pytest.raises(RuleFileError) as info:
        parse_rule(EXAMPLE.replace(*broken))
    text = str(info.value)
    assert text.startswith(key) and fix in text, text
    assert "DESIGN" not in text and "correct the value" not in text
    if "unknown key" in text:
        assert "docs/rules.md" in text and (ROOT / "docs" / "rules.md").is_file()
