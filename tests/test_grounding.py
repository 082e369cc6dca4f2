"""Grounding without a model: the labelled set from real qwen attempts, and the matching rules."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from daemon.rules.claims import Claim, claims_of
from daemon.rules.grounding import EvidenceSet, quote_in_file, ungrounded
from daemon.rules.rulefile import Evidence, Rule

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import grounding as bench  # noqa: E402

KINDS = ("line", "path", "identifier", "quote")


def test_the_labelled_set_is_drawn_from_real_qwen_attempts() -> None:
    candidates = bench.candidates()
    assert len(candidates) >= 40
    labels = {c["label"] for c in candidates}
    assert labels == {"grounded", "hallucinated"}
    kinds = {c["kind"] for c in candidates if c["label"] == "hallucinated"}
    assert kinds == set(KINDS)
    folders = {c["attempt"] for c in candidates}
    assert len(folders) >= 5
    for folder in folders:
        attempt = bench.DATA / "attempts" / folder
        transcript = (attempt / "transcript.jsonl").read_text()
        first = json.loads(transcript.splitlines()[0])
        assert first["type"] == "process" and first["argv"].startswith("qwen --output-format")
        assert any(json.loads(line)["type"] == "tool_result" for line in transcript.splitlines())
        assert (attempt / "prompt.md").read_text().startswith("# Task")


def test_the_world_set_is_frozen_and_drawn_from_many_public_projects() -> None:
    assert bench.digest(name="world") == bench.recorded_digest(name="world"), (
        "world.toml or world/ changed since it was frozen: add cases, do not edit them"
    )
    cases = bench.candidates(name="world")
    assert len(cases) >= 150
    assert len({c["repository"] for c in cases}) >= 30
    assert len({c["language"] for c in cases}) >= 6
    for case in cases:
        assert case["source"].startswith(f"https://github.com/{case['repository']}/")
        assert (bench.DATA / "world" / case["attempt"] / "checks.log").is_file()
    labels = [c["label"] for c in cases]
    assert 0.4 <= labels.count("grounded") / len(labels) <= 0.6


def test_the_tools_set_is_frozen_and_drawn_from_public_projects() -> None:
    assert bench.digest(name="tools") == bench.recorded_digest(name="tools"), (
        "tools.toml or tools/ changed since it was frozen: add cases, do not edit them"
    )
    cases = bench.candidates(name="tools")
    assert len(cases) >= 40
    assert len({c["repository"] for c in cases}) >= 10
    assert {c["kind"] for c in cases} == {"size", "count", "summary", "line"}
    for case in cases:
        assert case["source"].startswith(f"https://github.com/{case['repository']}/")
        assert (bench.DATA / "tools" / case["attempt"] / "checks.log").is_file()
    for kind in ("size", "count", "summary"):
        labels = {c["label"] for c in cases if c["kind"] == kind}
        assert labels == {"grounded", "hallucinated"}, kind


def test_the_check_keeps_grounded_candidates_and_rejects_every_hallucinated_kind() -> None:
    outcomes = bench.evaluate()
    figures = bench.rates(outcomes)
    print(
        f"grounded rejected {figures['grounded_rejected']:.1%}, hallucinated accepted "
        f"{figures['hallucinated_accepted']:.1%}, accuracy {figures['accuracy']:.1%}"
    )
    wrong = [(o.id, o.reasons) for o in outcomes if not o.right]
    assert figures["accuracy"] >= 0.95, wrong
    assert figures["grounded_rejected"] <= 0.05, wrong
    for kind in KINDS:
        of_kind = [o for o in outcomes if o.label == "hallucinated" and o.kind == kind]
        assert of_kind and all(o.rejected for o in of_kind), (kind, wrong)


# --- the matching rules, on a small attempt folder ---------------------------------------------


@pytest.fixture
def evidence(tmp_path: Path) -> EvidenceSet:
    attempt = tmp_path / "attempt-1"
    attempt.mkdir()
    lines = [
        {
            "ts": "2026-11-30T17:40:33.222663Z",
            "stream": "stdout",
            "type": "tool_call",
            "tool": "run_shell_command",
            "call_id": "c1",
            "arguments": {"command": "cat -n settings.ini"},
        },
        {
            "ts": "2026-11-30T17:41:19.5Z",
            "stream": "stdout",
            "type": "tool_result",
            "call_id": "c1",
            "output": "     1\t[server]\n     2\ttimeout_seconds = 30",
        },
        {"ts": "2026-11-30T17:41:20Z", "stream": "stdout", "type": "usage", "input_tokens": 4180},
        {
            "ts": "2026-11-30T17:41:21Z",
            "stream": "stdout",
            "type": "text",
            "text": "fetch.HTTPError raised; parse_config failed; getHTTP2Error seen in 2017",
        },
    ]
    (attempt / "transcript.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    (attempt / "checks.log").write_text(
        "$ pytest\nE       AssertionError: assert 8 == 11\n"
        'File "/tmp/tree/check.py", line 2, in <module>\n'
        "tests/test_cart.py:5: AssertionError\n1 failed,\n2 passed in 0.13s\n"
    )
    (attempt / "diff.patch").write_text(
        "diff --git a/fetch.py b/fetch.py\n--- a/fetch.py\n+++ b/fetch.py\n"
        "@@ -7,3 +7,3 @@ class HTTPError(Exception):\n RETRYABLE = {404}\n-MAX = 3\n+MAX = 1\n"
    )
    (attempt / "prompt.md").write_text("# Task\nFix it.\n")
    return EvidenceSet.from_dir(attempt)


def holds(evidence: EvidenceSet, text: str, where: str = "Why") -> dict[str, bool]:
    return {str(c): evidence.holds(c) for c in claims_of(text, where)}


@pytest.mark.parametrize(
    "why",
    [
        "fetch_json() raised HTTPErrors twice.",  # plural of an identifier
        "The `HTTPError`'s text and the HTTPError's status.",  # possessive
        "Both AssertionErrors came from `assert 8 == 11`.",  # plural, and a code span
        'pytest said "E AssertionError: assert 8 == 11".',  # whitespace differs
        'The checks ended "1 failed, 2 passed in 0.13s".',  # a line break in the evidence
        'The checks ended "1 failed,\n2 passed in 0.13s".',  # a line break in the claim
        "settings.ini line 2 holds timeout_seconds; tests/test_cart.py:5 failed.",
        "check.py line 2 raised, and fetch.py:8 sets MAX.",  # a traceback, a diff hunk
    ],
)
def test_grounded_wording_is_found(evidence: EvidenceSet, why: str) -> None:
    found = holds(evidence, why.replace("fetch_json()", "parse_config"))
    assert all(found.values()), found


@pytest.mark.parametrize(
    ("why", "claim"),
    [
        ("parse_configs failed.", "identifier 'parse_configs'"),  # an underscore: exact
        ("getHTTP2Errors were seen.", "identifier 'getHTTP2Errors'"),  # a digit: exact
        ("It failed 17 times.", "number '17'"),  # 17 only inside 2017 and a timestamp
        ("It failed 33 times.", "number '33'"),  # only in a timestamp
        ("It used 4180 tokens.", "number '4180'"),  # bookkeeping, not what the agent saw
        ('pytest said "E AssertionError: assert 8 == 12".', "quoted"),
        ("settings.ini line 3 holds timeout_seconds.", "line '3' of settings.ini"),
        ("fetch.py line 14 raises.", "line '14' of fetch.py"),
        ("The HTTPErrorz class.", "identifier 'HTTPErrorz'"),
    ],
)
def test_what_the_evidence_lacks_is_not_found(evidence: EvidenceSet, why: str, claim: str) -> None:
    found = holds(evidence, why)
    assert any(text.startswith(claim) and not ok for text, ok in found.items()), found


def test_line_in_a_file_may_also_mean_words_written_in_it(evidence: EvidenceSet) -> None:
    (claim,) = [c for c in claims_of("It cited line 2 in REVIEW.md.", "Why") if c.kind == "line"]
    assert claim == Claim("line", "REVIEW.md:2", "Why", alt="line 2")
    assert evidence.holds(claim)  # "line 2" is written in the evidence (the traceback)
    assert not evidence.holds(claims_of("line 9 in REVIEW.md", "Why")[0])


def test_evidence_quotes_are_found_whitespace_aside_and_point_at_their_line(
    evidence: EvidenceSet,
) -> None:
    entries = [
        Evidence(path="checks.log", line=1, quote="E AssertionError: assert 8 == 11"),
        Evidence(path="checks.log", line=1, quote="1 failed, 2 passed"),
        Evidence(path="transcript.jsonl", line=9, quote="[server] 2 timeout_seconds = 30"),
    ]
    missing, checked = ungrounded("Rule.", "Why.", evidence, entries)
    assert missing == []
    assert [e.line for e in checked] == [2, 5, 2]
    wrong = [Evidence(path="checks.log", line=1, quote="1 failed, 3 passed")]
    missing, _ = ungrounded("Rule.", "Why.", evidence, wrong)
    assert missing == ["evidence quote '1 failed, 3 passed' is not in checks.log"]
    log = evidence.root / "checks.log"
    assert quote_in_file(log, "E AssertionError:  assert 8 == 11")
    assert not quote_in_file(log, "assert 9 == 11")


def test_a_word_before_a_remark_is_not_an_identifier() -> None:
    texts = {c.text for c in claims_of("It ran grep (it printed 3) and add() failed.", "Why")}
    assert "grep" not in texts and "add" in texts


# --- sizes, counts, summaries and shown lines as the tools print them ------------------------


def _shell(call_id: str, command: str, output: str) -> str:
    """A tool call and its result as a qwen transcript holds them."""
    call = {"type": "tool_call", "tool": "run_shell_command", "call_id": call_id}
    call["arguments"] = {"command": command}
    result = {"type": "tool_result", "call_id": call_id, "output": output}
    return json.dumps(call) + "\n" + json.dumps(result) + "\n"


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    attempt = tmp_path / "attempt-1"
    attempt.mkdir()
    (attempt / "transcript.jsonl").write_text(
        _shell("c1", "wc -c src/handlers/stub.py", "31 src/handlers/stub.py\n")
        + _shell("c2", "wc -l src/handlers/stub.py", "4 src/handlers/stub.py\n")
        + _shell("c3", "grep -c TODO src/a.py src/b.py", "src/a.py:7\nsrc/b.py:0\n")
        + _shell("c4", "cat src/handlers/stub.py", "def stub():\n    pass\n\n# end\n")
        + _shell("c5", "du -s build", "12\tbuild\n")
        + _shell("c6", "ls -l setup.cfg", "-rw-r--r-- 1 dev dev 905 Dec  1 10:00 setup.cfg\n")
    )
    # pytest with colour on (PY_COLORS=1): the codes sit inside the summary line.
    (attempt / "checks.log").write_text(
        "$ pytest -q\n\x1b[31mF\x1b[0m...\n"
        "\x1b[31m===== \x1b[31m\x1b[1m1 failed\x1b[0m, \x1b[32m3 passed\x1b[0m\x1b[31m in 0.12s"
        "\x1b[0m\x1b[31m =====\x1b[0m\n[exit 1 after 0.5s]\n"
    )
    return attempt


@pytest.mark.parametrize(
    "why",
    [
        "`wc -c` shows src/handlers/stub.py is 31 bytes.",  # the seeds' size claim
        "src/handlers/stub.py is 31 B, 4 lines.",
        "setup.cfg is 905 bytes.",  # ls -l's size column
        "The build folder takes 12K, 12 KiB.",  # du's kibibyte blocks
        "src/a.py has 7 matching lines.",  # grep -c
        'pytest ended "=== 1 failed, 3 passed in 0.12s ===".',  # colour codes aside
        "Line 4 of src/handlers/stub.py is a comment; stub.py:2 passes.",  # cat showed them
    ],
)
def test_sizes_counts_summaries_and_shown_lines_are_found(tools: Path, why: str) -> None:
    found = holds(EvidenceSet.from_dir(tools), why)
    assert all(found.values()), found


@pytest.mark.parametrize(
    ("why", "claim"),
    [
        ("src/handlers/stub.py is 4 bytes.", "size '4 bytes'"),  # 4 is its line count
        ("src/handlers/stub.py has 31 lines.", "count '31 lines'"),  # 31 is its byte count
        ("setup.cfg is 1 bytes.", "size '1 bytes'"),  # the link count
        ("The build folder takes 12 bytes.", "size '12 bytes'"),  # du counts kibibytes
        ("The build folder takes 12 MB.", "size '12 MB'"),
        ('pytest ended "1 failed, 3 passed in 0.13s".', "summary"),  # another duration
        ('pytest ended "2 failed, 3 passed in 0.12s".', "summary"),
        ("src/a.py:7 holds a TODO.", "line '7' of src/a.py"),  # grep -c's count
        ("src/handlers/stub.py:4 is its end.", "line '4' of src/handlers/stub.py"),
        ("Line 5 of src/handlers/stub.py.", "line '5' of src/handlers/stub.py"),  # cat: 4
    ],
)
def test_sizes_and_counts_of_another_kind_or_file_are_not_found(
    tools: Path, why: str, claim: str
) -> None:
    evidence = EvidenceSet.from_dir(tools)
    if claim.startswith("line '4'"):
        # wc -l printed 4 for it too: a line count is not a line; only cat shows line 4.
        (tools / "transcript.jsonl").write_text(
            _shell("c2", "wc -l src/handlers/stub.py", "4 src/handlers/stub.py\n")
        )
        evidence = EvidenceSet.from_dir(tools)
    found = holds(evidence, why)
    assert any(text.startswith(claim) and not ok for text, ok in found.items()), found


def test_a_summary_quoted_in_the_rule_is_one_claim() -> None:
    claims = claims_of('Keep "=== 1 failed, 3 passed in 0.12s ===" in mind.', "Rule", True)
    assert claims == [Claim("summary", "=== 1 failed, 3 passed in 0.12s ===", "Rule")]
    assert [c.kind for c in claims_of("It is 31 bytes, 132 MiB and 4 lines.", "Why")] == [
        "count",
        "size",
        "size",
    ]


def test_shell_sessions_in_text_evidence_count_with_their_prompts(tmp_path: Path) -> None:
    (tmp_path / "session.txt").write_text(
        "%stat aaa.c # stat shows the size\n  File: aaa.c\n  Size: 470\tBlocks: 8\n"
        "➜  ~ wc install.yaml\n       1      12      43 install.yaml\n"
        "user@host:~/x$ sed -n '10,12p' app.py\na = 1\nb = 2\nc = 3\n"
    )
    evidence = EvidenceSet.from_dir(tmp_path)
    why = "aaa.c is 470 bytes; install.yaml is 43 bytes with 1 line and 12 words; app.py:11 sets b."
    found = holds(evidence, why)
    assert all(found.values()), found
    assert not all(holds(evidence, "install.yaml is 12 bytes; app.py:13 sets d.").values())


def test_the_home_finds_a_measured_size_in_the_lines_a_worker_sends(tools: Path) -> None:
    """The Temporal engine's lesson: the worker's excerpts hold the command and its output."""
    from daemon.engine.temporal.lessons import excerpts, write_excerpts

    why = "`wc -c` shows src/handlers/stub.py is 31 bytes; line 4 of src/handlers/stub.py ends it."
    rule = Rule(rule="Keep src/handlers/stub.py small.", why=why, how_to_apply="Check it.")
    home = tools.parent / "home-attempt"
    home.mkdir()
    write_excerpts(home, excerpts(tools, rule))
    missing, _ = ungrounded(rule.rule, rule.why, EvidenceSet.from_dir(home), [])
    assert missing == []
    kept = (home / "transcript.jsonl").read_text().splitlines()
    assert kept[2:4] == ["", ""] and "wc -c" in kept[0] and "cat src" in kept[6]


def test_a_file_printed_whole_gives_its_count_of_lines(tmp_path: Path) -> None:
    (tmp_path / "transcript.jsonl").write_text(
        _shell("c1", "cat -n app.py", "     1\timport os\n     2\t\n     3\tprint(os.sep)\n")
        + _shell("c2", "head -n 2 lib.py", "a = 1\nb = 2\n")
    )
    evidence = EvidenceSet.from_dir(tmp_path)
    assert all(holds(evidence, "app.py has 3 lines; app.py:3 prints.").values())
    # head printed two lines of lib.py: that is not its count of lines.
    assert not all(holds(evidence, "lib.py has 2 lines.").values())
