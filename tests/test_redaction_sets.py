"""Redaction on the labelled sets of tests/data/redaction/ (frozen: SHA256SUMS).

gitleaks_tps.json: every true positive of gitleaks' rule tests with the secret its rule
captures; bare_tokens.json: provider tokens printed alone; control.json: git SHAs, checksums,
uuids, test ids and lockfile hashes that must stay verbatim. Built by build.py from a gitleaks
checkout, then frozen: add items, do not edit them to fit the rules.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from daemon.redact import Redactor, redact
from daemon.redaction.ruleset import FILES, RuleFile, ruleset
from daemon.rules.patterns import compile_pattern

DATA = Path(__file__).parent / "data" / "redaction"
TARGET = 0.98


def load(name: str) -> list:
    return json.loads((DATA / name).read_text())


def sentence(text: str) -> str:
    """`text` as an agent would print it, inside an ordinary sentence."""
    return f"While fixing the build I saw {text} in the output, so I kept going."


def by_lines(text: str) -> str:
    """`text` redacted as a transcript redacts it: line by line."""
    redactor = Redactor()
    return "\n".join(redactor.line(line) for line in text.split("\n"))


def test_the_sets_are_the_frozen_ones() -> None:
    for line in (DATA / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == digest, name


def test_every_rule_compiles_with_re2_and_ids_are_unique() -> None:
    ids: list[str] = []
    for name in FILES:
        text = resources.files("daemon.redaction").joinpath(name).read_text()
        rules = RuleFile.model_validate(tomllib.loads(text)).rules
        for rule in rules:
            if rule.regex:
                ids.append(rule.id)
                assert rule.keywords, rule.id  # without one a rule would run on every line
    assert len(ids) == len(set(ids)) >= 250
    for rule in ruleset().rules:
        rule.regex()  # compiles with RE2 within the rule set's memory bound


def test_gitleaks_examples_are_kept_out_by_lines_and_whole() -> None:
    tps = load("gitleaks_tps.json")
    assert len(tps) > 5000 and len({t["rule"] for t in tps}) > 200
    for redact_text in (by_lines, redact):
        leaked = [t for t in tps if t["secret"] in redact_text(sentence(t["text"]))]
        share = 1 - len(leaked) / len(tps)
        assert share >= TARGET, (share, [(t["rule"], t["text"][:80]) for t in leaked[:20]])


def test_bare_provider_tokens_are_kept_out() -> None:
    bare = load("bare_tokens.json")
    assert len({t["service"] for t in bare}) >= 100
    leaked = [t for t in bare if t["secret"] in by_lines(sentence(t["secret"]))]
    share = 1 - len(leaked) / len(bare)
    assert share >= TARGET, (share, [(t["service"], t["secret"][:24]) for t in leaked])


@pytest.mark.parametrize(
    "form", ["It ends the sentence: {}.", "({})", "`{}`", "'{}'", "{}:", "<{}>", "a={}&b=1"]
)
def test_bare_tokens_are_kept_out_wherever_prose_puts_them(form: str) -> None:
    bare = load("bare_tokens.json")
    leaked = [t for t in bare if t["secret"] in by_lines(form.format(t["secret"]))]
    share = 1 - len(leaked) / len(bare)
    assert share >= TARGET, (share, [(t["service"], t["secret"][:24]) for t in leaked])


@pytest.mark.parametrize("text", load("control.json"))
def test_control_text_stays_verbatim(text: str) -> None:
    assert by_lines(text) == text
    assert redact(text) == text
    assert redact(sentence(text)) == sentence(text)


def test_gitleaks_false_positives_are_mostly_left_alone() -> None:
    # Many are real secrets by another rule (a GitHub token is a false positive of Slack's
    # rule): redaction may take more than one rule finds, within a bound.
    fps = load("gitleaks_fps.json")
    altered = [f for f in fps if by_lines(f["text"]) != f["text"]]
    assert len(altered) / len(fps) <= 0.2


def test_redacting_the_redacted_changes_nothing() -> None:
    for item in load("gitleaks_tps.json")[::7] + load("bare_tokens.json"):
        once = redact(sentence(item.get("text") or item["secret"]))
        assert redact(once) == once


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Authorization: token 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39", "3f2a9c1e8b7d6a5f4e3d"),
        ("db_password = 'correct horse battery staple'", "correct horse"),
        ('curl -H "Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l" x', "YWxhZGRpbjpvcGVuc2VzYW1l"),
        ("  -u developer:yqDVtkqPECriaLRi \\", "yqDVtkqPECriaLRi"),
    ],
)
def test_what_main_let_through_is_caught(text: str, secret: str) -> None:
    assert secret not in redact(text)


def test_a_value_on_the_line_after_its_name_is_caught() -> None:
    token = "Zf3D0LXCM3EIMbgJpUNnkRtOfOueHznB"
    lines = ["<apiToken>", f"    {token}", "</apiToken>"]
    assert token not in by_lines("\n".join(lines))
    diff = by_lines("\n".join(f"+{line}" for line in lines))  # as diff.patch holds it
    assert token not in diff and diff.startswith("+<apiToken>\n+    [REDACTED:")
    redactor = Redactor()
    assert [redactor.line(line) for line in ["name:", "  loopd", "x"]] == ["name:", "  loopd", "x"]


def test_every_rule_pattern_also_passes_the_rule_pattern_check() -> None:
    # The same RE2 loopd runs rule triggers on, within its own memory bound where it fits.
    fits = [r for r in ruleset().rules if len(r.spec.regex) <= 500]
    for rule in fits:
        compile_pattern(rule.spec.regex)
