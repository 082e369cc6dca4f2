"""The evidence bundle: budget, what the summary cites kept whole, cut markers, redaction."""

from __future__ import annotations

import json
import random
import re
import tracemalloc
from pathlib import Path
from typing import Any

from daemon.model.evidence import build_evidence, citations, trim

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
TS = "2026-11-29T02:00:01.123456Z"


def event(kind: str, stream: str = "stdout", **fields: Any) -> str:
    return json.dumps({"ts": TS, "stream": stream, "type": kind, **fields}) + "\n"


def tool(call_id: str, name: str, arguments: dict[str, Any], output: str) -> str:
    return event("tool_call", tool=name, call_id=call_id, arguments=arguments) + event(
        "tool_result", tool=name, call_id=call_id, output=output
    )


CITED_OUTPUT = (
    "============================= test session starts ==============================\n"
    + "".join(f"tests/test_parser.py::test_case_{i:03d} PASSED\n" for i in range(60))
    + "============================== 60 passed in 0.42s ==============================\n"
)


def write_big_attempt(folder: Path, size: int = 5_200_000) -> None:
    """An attempt folder whose transcript is `size` bytes of noisy tool calls and output."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "render", "widget", "cache", "queue"]
    with (folder / "transcript.jsonl").open("w") as out:
        out.write(event("process", stream="loopd", text="agent started, pid 4242"))
        written, n = 0, 0
        placed = False
        while written < size:
            n += 1
            noise = "\n".join(
                " ".join(rng.choice(words) for _ in range(12)) for _ in range(rng.randint(5, 80))
            )
            line = tool(f"c{n}", "read_file", {"path": f"src/mod_{n}.txt"}, noise)
            if n % 500 == 0:
                line += event("text", text=f"Still working, step {n}.")
            if not placed and written > size // 2:
                line += tool(
                    "c-cited",
                    "run_shell_command",
                    {"command": "pytest tests/test_parser.py -q"},
                    CITED_OUTPUT,
                )
                line += tool("c-key", "read_file", {"path": ".env"}, f"AWS_KEY={AWS_KEY}\n")
                placed = True
            out.write(line)
            written += len(line)
        out.write(event("final", text="Fixed the parser; `pytest tests/test_parser.py -q` passed."))
    (folder / "diff.patch").write_text(
        "diff --git a/src/parser.py b/src/parser.py\n--- a/src/parser.py\n+++ b/src/parser.py\n"
        "@@ -1,2 +1,2 @@\n-def parse(s): return None\n+def parse(s): return s.split(',')\n"
    )
    (folder / "checks.log").write_text("$ pytest -q\n60 passed in 0.40s\nexit 0\n")
    (folder / "prompt.md").write_text("# Task\nFix the parser.\n")


SUMMARY = (
    "I fixed `parse()` in src/parser.py (line 1) and ran `pytest tests/test_parser.py -q`: "
    "60 passed."
)


def test_citations_name_files_lines_commands_and_tests() -> None:
    cited = citations(
        "Changed src/app/parser.py at line 42 and lines 10-12, fixed `load_config()`; "
        "ran pytest -q tests/test_app.py and test_parse_empty passed; see utils.rs:17."
    )
    texts = {c.text for c in cited}
    assert {"src/app/parser.py", "parser.py", "load_config()", "test_parse_empty"} <= texts
    assert {"42", "10", "12", "17"} <= texts
    assert "pytest -q tests/test_app.py" in texts


def test_trim_keeps_both_ends_and_marks_the_cut() -> None:
    text = "A" * 500 + "B" * 500
    trimmed, cut = trim(text, 200)
    assert len(trimmed) <= 200 and trimmed.startswith("A") and trimmed.endswith("B")
    assert f"[... {cut} characters cut ...]" in trimmed
    assert trim("short", 200) == ("short", 0)


def test_big_transcript_within_budget_keeps_the_cited_output_whole(tmp_path: Path) -> None:
    attempt = tmp_path / "attempt-1"
    write_big_attempt(attempt)
    assert (attempt / "transcript.jsonl").stat().st_size > 5_000_000

    tracemalloc.start()
    evidence = build_evidence(attempt, "Fix the parser.", SUMMARY, 12000, ["none really"])
    text = evidence.render()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    assert len(text) <= 12000 * 4
    assert CITED_OUTPUT in text  # whole, verbatim
    cited = [
        p
        for p in (p for p in evidence.parts if p.cited)
        if "pytest tests/test_parser.py" in p.title
    ]
    assert cited and cited[0].cut == 0 and "tool call `run_shell_command`" in cited[0].title
    assert re.search(r"\[\.\.\. \d+ characters cut", text)  # what was left out is marked
    assert "60 passed in 0.40s" in text  # the checks' output is there
    assert "+def parse(s): return s.split(',')" in text  # and the diff
    assert "the agent's final message" in text  # the end of the transcript, where it concluded
    assert "- none really" in text
    assert peak < 5_000_000  # streamed: far less than the transcript in memory


def test_secrets_in_the_attempt_never_reach_the_evidence(tmp_path: Path) -> None:
    attempt = tmp_path / "attempt-1"
    attempt.mkdir()
    (attempt / "transcript.jsonl").write_text(
        tool("c1", "read_file", {"path": ".env"}, f"AWS_ACCESS_KEY_ID={AWS_KEY}\n")
    )
    (attempt / "checks.log").write_text(f"token leaked: {AWS_KEY}\n")
    evidence = build_evidence(attempt, "task", f"I read .env with {AWS_KEY}", 4000)
    text = evidence.render()
    assert AWS_KEY not in text
    assert "[REDACTED:aws-access-key]" in text


def test_small_attempt_is_kept_whole_and_in_order(tmp_path: Path) -> None:
    attempt = tmp_path / "attempt-2"
    attempt.mkdir()
    (attempt / "transcript.jsonl").write_text(
        event("process", stream="loopd", text="started")
        + tool("a", "run_shell_command", {"command": "grep -c TODO app.py"}, "17\n")
        + event("text", text="Reviewing app.py now.")
        + event("text", text="Second line of prose.")
        + event("nudge", stream="loopd", text="Continue the task.")
        + tool("b", "read_file", {"path": "app.py"}, "1: x = 1\n2: # TODO\n")
        + event("tool_result", tool="orphan", call_id="zz", output="no call for me", is_error=True)
        + "this line is not JSON\n"
    )
    evidence = build_evidence(attempt, "Review app.py", "Line 17 of app.py has a TODO.", 12000)
    text = evidence.render()
    assert "characters cut" not in text
    titles = [p.title for p in evidence.parts]
    assert titles == [
        "line 1: loopd process",
        'lines 2-3: tool call `run_shell_command` {"command": "grep -c TODO app.py"}',
        "lines 4-5: output (stdout text)",
        "line 6: loopd nudge",
        'lines 7-8: tool call `read_file` {"path": "app.py"}',
        "line 9: tool result `orphan` (its call is not in the transcript) (error)",
        "line 10: output (raw)",
    ]
    assert '$ run_shell_command {"command": "grep -c TODO app.py"}\n17\n' in text
    assert "Reviewing app.py now.\nSecond line of prose." in text
    assert text.index("# Task") < text.index("# The agent's final summary") < text.index("line 1:")


def test_diff_keeps_the_cited_file_whole_before_others(tmp_path: Path) -> None:
    attempt = tmp_path / "attempt-1"
    attempt.mkdir()
    big = "".join(f"+line {i} of generated data\n" for i in range(4000))
    cited_hunk = "+def load_config():\n+    return {}\n"
    (attempt / "diff.patch").write_text(
        f"diff --git a/data.csv b/data.csv\n@@ -0,0 +1,4000 @@\n{big}"
        f"diff --git a/src/config.py b/src/config.py\n@@ -1 +1,2 @@\n{cited_hunk}"
        f"diff --git a/other.txt b/other.txt\n@@ -1 +1 @@\n{big}"
    )
    evidence = build_evidence(attempt, "task", "Added `load_config()` in src/config.py.", 3000)
    text = evidence.render()
    assert len(text) <= 3000 * 4
    assert cited_hunk in text
    config_part = next(p for p in evidence.parts if p.title.startswith("src/config.py"))
    assert config_part.cited and config_part.cut == 0
    data_part = next(p for p in evidence.parts if p.title.startswith("data.csv"))
    assert data_part.cut > 0


def test_huge_checks_log_keeps_its_end(tmp_path: Path) -> None:
    attempt = tmp_path / "attempt-1"
    attempt.mkdir()
    lines = "".join(f"collected item {i}\n" for i in range(200_000))
    (attempt / "checks.log").write_text(lines + "FAILED tests/test_x.py::test_y - boom\n")
    evidence = build_evidence(attempt, "task", "All done.", 2000)
    text = evidence.render()
    assert len(text) <= 2000 * 4
    assert "FAILED tests/test_x.py::test_y - boom" in text
    assert "collected item 0\n" in text
