"""Issue 6 end to end: the promotion loop through `loopd once` and `loopd rules`.

Real subprocesses on real git repositories, a `command` agent, and `[verifier]` pointing at
the scripted server. The agent edits `legacy/calc.py` (which nothing imports) and says so in
its transcript, unless its prompt's `# Rules from earlier runs` tells it to fix the
top-level `calc.py`: then the checks pass. Every agent start is appended to a marker file.
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from daemon.rules.library import RuleLibrary
from daemon.rules.rulefile import Rule
from tests.helpers import events, loopd, make_home, make_repo, stored_text, talk, transcript_text
from tests.model_server import call_name

REPO = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "legacy/calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5, f'add(2, 3) gave {add(2, 3)}'\n",
}
# What the post-mortem's rule says; the agent keys on it.
RULE_MARK = "the top-level `calc.py`"
AGENT = """\
import pathlib, sys
prompt = sys.stdin.read()
with open(sys.argv[1], "a") as marker:
    marker.write("started\\n")
rules = ""
if "# Rules from earlier runs" in prompt:
    rules = prompt.split("# Rules from earlier runs", 1)[1].split("\\n# ", 1)[0]
if RULE_MARK in rules:
    p = pathlib.Path("calc.py")
    p.write_text(p.read_text().replace("a - b", "a + b"))
    print("fixed add in calc.py as the rule says")
else:
    p = pathlib.Path("legacy/calc.py")
    p.write_text(p.read_text().replace("a - b", "a + b"))
    print("patched legacy/calc.py and left calc.py alone")
"""
TASK_A = "Make check.py pass: add in calc.py returns the wrong sum."
TASK_B = "The sums are wrong: repair calc.py so that python3 check.py exits 0."

CRITIC = {
    "score": 9,
    "verdict": "The checks decide this one.",
    "unsupported_claims": [],
    "feedback": "Make the checks pass.",
}
# A skill post-mortem after a late pass, unless a test scripts one: generic, so rejected
# without a model call.
GENERIC_SKILL = {
    "kind": "skill",
    "rule": "Be more careful with the task.",
    "why": "It worked in the end.",
    "how_to_apply": "Think before acting.",
    "trigger_intent": "Any task",
    "trigger_patterns": [],
    "severity": "remind",
    "evidence": [{"path": "prompt.md", "line": 1, "quote": "# Task"}],
}
LEARNED = {
    "kind": "failure",
    "rule": "Fix `add` in " + RULE_MARK + " that check.py imports; `legacy/calc.py` is dead.",
    "why": (
        'The agent printed "patched legacy/calc.py" and the checks still failed with '
        "`add(2, 3) gave -1`."
    ),
    "how_to_apply": "Open check.py first and edit the module its import names.",
    "trigger_intent": "Tasks that fix arithmetic in calc.py so that check.py passes",
    "trigger_patterns": [r"(?i)\bcalc\.py\b"],
    "severity": "escalate",  # a learned rule is always remind: the verifier lowers it
    "evidence": [
        {"path": "transcript.jsonl", "line": 3, "quote": "patched legacy/calc.py"},
        {"path": "checks.log", "line": 1, "quote": "add(2, 3) gave -1"},
    ],
}
AGREES = {"grounded": True, "unsupported": [], "contradicts": [], "reason": "grounded"}


def default_reply(body: dict[str, Any]) -> Any:
    """Replies for calls a test does not script: a lenient critic, no intent match."""
    name = call_name(body)
    if name == "critic_verdict":
        return {"json": CRITIC}
    if name == "trigger_matches":
        return {"json": {"matches": []}}
    if name == "postmortem_rule":
        return {"json": GENERIC_SKILL}
    return {"status": 400, "message": f"the test did not expect a {name} call"}


def setup_home(
    tmp_path: Path, server: Any, loops: dict[str, dict[str, Any]], shared: bool = False
) -> tuple[Path, Path]:
    """A home whose loops each get a fresh repository (`shared`: all loops one repository);
    returns (home, agent marker file)."""
    server.script(default_reply)
    script = tmp_path / "agent.py"
    script.write_text(AGENT.replace("RULE_MARK", repr(RULE_MARK)))
    folder, sandbox = talk(tmp_path)  # the agent runs sandboxed: its marker lives here
    marker = folder / "agent-started.txt"
    argv = [sys.executable, str(script), str(marker)]
    config = (
        f'[verifier]\nbase_url = "{server.base_url}"\nmodel = "critic-model"\n'
        'timeout = "20s"\njudge_timeout = "20s"\npending_limit = "30s"\n\n'
        f'[agents.fixer]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'
    ) + sandbox
    files = {}
    for name, extra in loops.items():
        folder = tmp_path / ("repo" if shared else f"repo-{name}")
        repo = folder if shared and folder.exists() else make_repo(folder, REPO)
        lines = [
            f'repo = "{repo}"',
            'agent = "fixer"',
            'done_when = ["python3 check.py"]',
            'attempt_timeout = "60s"',
            'stall_after = "30s"',
            "max_nudges = 0",
        ]
        lines += [f"{key} = {json.dumps(value)}" for key, value in extra.items()]
        files[name] = "\n".join(lines) + "\n"
    return make_home(tmp_path / "home", config, files), marker


def once(home: Path, loop: str) -> tuple[int, str, dict[str, Any]]:
    """`loopd once LOOP`: (exit code, run id, run.toml)."""
    proc = loopd(home, "once", loop, timeout=90)
    assert proc.stdout, proc.stderr
    run_id = proc.stdout.splitlines()[0]
    path = home / "state" / "runs" / run_id / "run.toml"
    assert path.is_file(), proc.stdout + proc.stderr
    return proc.returncode, run_id, tomllib.loads(path.read_text())


def seed(home: Path, status: str, **fields: Any) -> str:
    """A rule written by a person into `rules/STATUS/`; returns its id."""
    data: dict[str, Any] = {"how_to_apply": "Do it.", "why": "A person decided so."}
    data.update(fields)
    return RuleLibrary(home / "rules").add(Rule(**data), status).rule.id  # type: ignore[arg-type]


def rule_file(home: Path, status: str, rule_id: str) -> dict[str, Any]:
    text = (home / "rules" / status / f"{rule_id}.md").read_text()
    return tomllib.loads(text.split("+++")[1])


def run_events(home: Path, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in events(home) if e.get("run") == run_id and e["type"] == kind]


def test_a_failure_becomes_a_rule_that_fixes_attempt_2_and_a_later_task(
    tmp_path: Path, model_server: Any
) -> None:
    # Two loops on one repository: a learned rule is scoped to the repository it came from.
    home, marker = setup_home(
        tmp_path,
        model_server,
        {"calc": {"task": TASK_A, "max_attempts": 2}, "sums": {"task": TASK_B, "max_attempts": 1}},
        shared=True,
    )
    model_server.add({"json": LEARNED}, name="postmortem_rule")
    model_server.add({"json": AGREES}, name="rule_verification")

    code, run_a, run = once(home, "calc")
    assert code == 0, run
    assert run["outcome"] == "succeeded"
    assert [a["checks_passed"] for a in run["attempts"]] == [False, True]
    attempt_1 = home / "state" / "runs" / run_a / "attempt-1"
    transcript = transcript_text(attempt_1)
    assert "patched legacy/calc.py" in transcript

    # The post-mortem's rule is grounded, verified by the model, and filed under trial/.
    trial = sorted((home / "rules" / "trial").glob("*.md"))
    assert len(trial) == 1, [p.name for p in trial]
    rid = trial[0].stem
    front = rule_file(home, "trial", rid)
    assert front["severity"] == "remind" and front["kind"] == "failure"
    assert front["scope"]["repos"] == [str((tmp_path / "repo").resolve())]
    assert front["verified_by"] == ["grounding", "duplicates", "model:critic-model"]
    assert front["source_run"] == run_a and front["source_task"] == TASK_A
    cited = {(e["path"], e["quote"]) for e in front["evidence"]}
    assert (f"runs/{run_a}/attempt-1/transcript.jsonl", "patched legacy/calc.py") in cited
    for entry in front["evidence"]:  # the line was corrected to where the quote is
        lines = stored_text(home / "state" / entry["path"]).splitlines()
        assert entry["quote"] in lines[entry["line"] - 1]
    verifications = model_server.chat_requests("rule_verification")
    assert len(verifications) == 1
    # The late pass was asked for a skill (a generic one here, rejected without the model).
    postmortems = model_server.chat_requests("postmortem_rule")
    assert len(postmortems) == 2
    assert 'Write a rule of kind "skill"' in postmortems[1]["messages"][-1]["content"]
    assert "patched legacy/calc.py" in json.dumps(verifications[0])

    # Attempt 2's prompt holds the rule; attempt 1's did not.
    first = (attempt_1 / "prompt.md").read_text()
    second = (home / "state" / "runs" / run_a / "attempt-2" / "prompt.md").read_text()
    assert "# Rules from earlier runs" not in first
    assert "# Rules from earlier runs" in second
    assert LEARNED["rule"] in second and LEARNED["how_to_apply"] in second
    assert rid in run["rules_fired"]
    assert [e["rule"] for e in run_events(home, run_a, "rule_fired")] == [rid]
    assert [e["rule"] for e in run_events(home, run_a, "rule_accepted")] == [rid]

    # The same task passing does not promote: the rule stays in trial with its counts.
    front = rule_file(home, "trial", rid)
    assert (front["fired"], front["helped"], front["harmed"]) == (1, 1, 0)

    # Another loop's task that the rule's pattern matches passes on its first attempt.
    code, run_b, run = once(home, "sums")
    assert code == 0, run
    assert run["outcome"] == "succeeded" and len(run["attempts"]) == 1
    prompt_b = (home / "state" / "runs" / run_b / "attempt-1" / "prompt.md").read_text()
    assert LEARNED["rule"] in prompt_b
    assert run["rules_fired"] == [rid]
    assert [e["why"] for e in run_events(home, run_b, "rule_fired")] == ["pattern"]
    assert not (home / "rules" / "trial" / f"{rid}.md").exists()
    front = rule_file(home, "active", rid)
    assert (front["fired"], front["helped"], front["harmed"]) == (2, 2, 0)
    promoted = run_events(home, run_b, "rule_promoted")
    assert [(e["rule"], e["from"], e["to"]) for e in promoted] == [(rid, "trial", "active")]
    assert marker.read_text().count("started") == 3
    listed = json.loads(loopd(home, "rules", "list", "--json").stdout)
    assert [(r["id"], r["status"], r["fired"], r["helped"]) for r in listed] == [
        (rid, "active", 2, 2)
    ]


UNGROUNDED = {
    **LEARNED,
    "severity": "remind",
    "rule": "Fix `parse_totals()` at line 4711 of `src/sums/engine.py` before check.py runs.",
    "why": 'The agent printed "patched legacy/calc.py" but never opened src/sums/engine.py.',
}
CANDIDATE_FILE = """\
+++
kind = "failure"
trigger_intent = "Tasks that fix arithmetic in calc.py"
trigger_patterns = ['(?i)\\bcalc\\.py\\b']
evidence = [{ path = "transcript.jsonl", line = 3, quote = "patched legacy/calc.py" }]
+++
**Rule:** Fix `parse_totals()` at line 4711 of `src/sums/engine.py` before check.py runs.

**Why:** The agent printed "patched legacy/calc.py" but never opened src/sums/engine.py.

**How to apply:** Open check.py first.
"""
NOT_IN_EVIDENCE = ("4711", "src/sums/engine.py", "parse_totals")


def test_a_candidate_citing_what_the_evidence_lacks_is_rejected_without_a_model_call(
    tmp_path: Path, model_server: Any
) -> None:
    home, _ = setup_home(tmp_path, model_server, {"calc": {"task": TASK_A, "max_attempts": 1}})
    model_server.add({"json": UNGROUNDED}, name="postmortem_rule")

    code, run_id, run = once(home, "calc")
    assert code == 1 and run["outcome"] == "escalated"
    assert len(model_server.chat_requests("postmortem_rule")) == 1
    assert model_server.chat_requests("rule_verification") == []
    assert list((home / "rules" / "trial").glob("*.md")) == []
    rejected = sorted((home / "rules" / "rejected").glob("*.md"))
    assert len(rejected) == 1
    reason = rule_file(home, "rejected", rejected[0].stem)["reason"]
    [event] = run_events(home, run_id, "rule_rejected")
    for claim in NOT_IN_EVIDENCE:
        assert claim in reason, reason
        assert claim in event["reason"], event
    assert "grounding" in reason

    # The same candidate written as a rule file, through `loopd rules verify`.
    candidate = tmp_path / "candidate.md"
    candidate.write_text(CANDIDATE_FILE)
    evidence = home / "state" / "runs" / run_id / "attempt-1"
    for extra in (["--no-model"], []):  # with the model configured, grounding still comes first
        out = loopd(home, "rules", "verify", str(candidate), "--evidence", str(evidence), *extra)
        assert out.returncode == 1, out.stdout + out.stderr
        assert out.stdout.startswith("rejected")
        for claim in NOT_IN_EVIDENCE:
            assert claim in out.stdout, out.stdout
    out = loopd(home, "rules", "verify", str(candidate), "--evidence", str(evidence), "--json")
    data = json.loads(out.stdout)
    assert out.returncode == 1 and data["decision"] == "rejected"
    assert data["model_called"] is False
    assert all(any(claim in m for m in data["missing"]) for claim in NOT_IN_EVIDENCE)
    assert model_server.chat_requests("rule_verification") == []
    # The grounded part alone is accepted, which shows the evidence folder was read.
    grounded = CANDIDATE_FILE.replace(
        "Fix `parse_totals()` at line 4711 of `src/sums/engine.py` before check.py runs.",
        "Fix `add` in the top-level `calc.py`, not `legacy/calc.py`.",
    ).replace(" but never opened src/sums/engine.py", "")
    candidate.write_text(grounded)
    out = loopd(home, "rules", "verify", str(candidate), "--evidence", str(evidence), "--no-model")
    assert out.returncode == 0, out.stdout + out.stderr


CONTRADICTING = {
    **LEARNED,
    "severity": "remind",
    "rule": "Change only " + RULE_MARK + "; leave `legacy/calc.py` exactly as it is.",
}


def test_a_candidate_that_contradicts_an_active_rule_is_rejected_with_its_id(
    tmp_path: Path, model_server: Any
) -> None:
    home, _ = setup_home(tmp_path, model_server, {"calc": {"task": TASK_A, "max_attempts": 1}})
    active = seed(
        home,
        "active",
        trigger_intent=LEARNED["trigger_intent"],
        trigger_patterns=[r"(?i)\blegacy\b"],
        rule="Apply every fix to `legacy/calc.py` too, so both copies stay in step.",
    )
    model_server.add({"json": CONTRADICTING}, name="postmortem_rule")
    model_server.add(
        {
            "json": {
                "grounded": True,
                "unsupported": [],
                "contradicts": [active],
                "reason": "one keeps legacy/calc.py unchanged, the other edits it",
            }
        },
        name="rule_verification",
    )

    code, run_id, run = once(home, "calc")
    assert code == 1 and run["outcome"] == "escalated"
    [verification] = model_server.chat_requests("rule_verification")
    assert active in verification["messages"][-1]["content"]  # the related rule went along
    rejected = sorted((home / "rules" / "rejected").glob("*.md"))
    assert len(rejected) == 1
    reason = rule_file(home, "rejected", rejected[0].stem)["reason"]
    assert f"contradicts {active}" in reason, reason
    [event] = run_events(home, run_id, "rule_rejected")
    assert active in event["reason"]
    assert list((home / "rules" / "trial").glob("*.md")) == []
    assert (home / "rules" / "active" / f"{active}.md").is_file()


def test_a_rule_firing_in_failing_runs_retires_and_a_deleted_rule_stops_firing(
    tmp_path: Path, model_server: Any
) -> None:
    home, _ = setup_home(tmp_path, model_server, {"calc": {"task": TASK_A, "max_attempts": 1}})
    common = {"trigger_intent": "Tasks about calc.py", "trigger_patterns": [r"(?i)\bcheck\.py\b"]}
    keeps = seed(home, "trial", rule="Run `python3 check.py` before you stop.", **common)
    deleted = seed(home, "active", rule="Read `check.py` before editing anything.", **common)

    code, run_1, run = once(home, "calc")
    assert code == 1
    assert sorted(run["rules_fired"]) == sorted([keeps, deleted])
    assert sorted(e["rule"] for e in run_events(home, run_1, "rule_fired")) == sorted(
        [keeps, deleted]
    )
    front = rule_file(home, "trial", keeps)
    assert (front["fired"], front["helped"], front["harmed"]) == (1, 0, 1)

    (home / "rules" / "active" / f"{deleted}.md").unlink()
    code, run_2, run = once(home, "calc")
    assert code == 1
    assert run["rules_fired"] == [keeps]
    assert [e["rule"] for e in run_events(home, run_2, "rule_fired")] == [keeps]
    # harmed 2 - helped 0 >= 2: retired, the file moved, an event says why.
    assert not (home / "rules" / "trial" / f"{keeps}.md").exists()
    front = rule_file(home, "retired", keeps)
    assert (front["fired"], front["helped"], front["harmed"]) == (2, 0, 2)
    [demoted] = run_events(home, run_2, "rule_demoted")
    assert demoted["rule"] == keeps and demoted["to"] == "retired"
    assert "harmed 2" in demoted["reason"]

    code, run_3, run = once(home, "calc")
    assert code == 1
    assert run["rules_fired"] == []
    assert run_events(home, run_3, "rule_fired") == []
    assert rule_file(home, "retired", keeps)["fired"] == 2
    prompt = (home / "state" / "runs" / run_3 / "attempt-1" / "prompt.md").read_text()
    assert "# Rules from earlier runs" not in prompt


def test_match_finds_a_rule_by_intent_through_one_model_call(
    tmp_path: Path, model_server: Any
) -> None:
    home, _ = setup_home(tmp_path, model_server, {})
    wanted = seed(
        home,
        "active",
        trigger_intent="Changing how money amounts are rounded or summed in invoices",
        trigger_patterns=[r"(?i)\binvoices?\b"],
        rule="Use `decimal.Decimal` for money in `billing/totals.py`, never float.",
    )
    others = [
        seed(
            home,
            "trial",
            trigger_intent=intent,
            trigger_patterns=[pattern],
            rule=rule,
        )
        for intent, pattern, rule in (
            ("Reviews that cite line numbers", r"(?i)\bline\s+numbers?\b", "Use `grep -n`."),
            ("Database schema migrations", r"(?i)\bmigrat", "Run `make migrate-check`."),
        )
    ]
    task = "Customers are charged a cent too much when the cart total has three items."
    lexical = loopd(home, "rules", "match", "--task", task, "--no-model", "--json")
    assert lexical.returncode == 0, lexical.stderr
    assert json.loads(lexical.stdout)["fired"] == []  # no pattern matches this task
    assert model_server.chat_requests() == []

    model_server.add({"json": {"matches": [wanted]}}, name="trigger_matches")
    out = loopd(home, "rules", "match", "--task", task)
    assert out.returncode == 0, out.stderr
    assert f"{wanted} (active): model" in out.stdout
    assert "model: called (1 call(s))" in out.stdout
    assert not any(rid in out.stdout for rid in others)
    [call] = model_server.chat_requests("trigger_matches")
    assert len(model_server.chat_requests()) == 1
    asked = call["messages"][-1]["content"]
    assert task in asked
    for rid in [wanted, *others]:  # one call for the whole task, every candidate in it
        assert rid in asked


@pytest.mark.parametrize(
    ("severity", "outcome"), [("refuse", "refused"), ("escalate", "escalated")]
)
def test_a_rule_promoted_by_a_person_ends_the_next_run_before_any_agent(
    tmp_path: Path, model_server: Any, severity: str, outcome: str
) -> None:
    home, marker = setup_home(tmp_path, model_server, {"calc": {"task": TASK_A}})
    rid = seed(
        home,
        "trial",
        trigger_intent="Tasks that touch calc.py",
        trigger_patterns=[r"(?i)\bcalc\.py\b"],
        rule="Do not let an agent change `calc.py`: the finance team owns it.",
    )
    out = loopd(home, "rules", "promote", rid, "--severity", severity)
    assert out.returncode == 0, out.stdout + out.stderr
    front = rule_file(home, "active", rid)
    assert front["severity"] == severity

    code, run_id, run = once(home, "calc")
    assert code == 1
    assert run["outcome"] == outcome
    assert rid in run["reason"]
    assert run.get("attempts", []) == []
    assert not marker.exists()  # the agent never started
    assert not (home / "state" / "runs" / run_id / "attempt-1").exists()
    assert run_events(home, run_id, "attempt_started") == []
    [fired] = run_events(home, run_id, "rule_fired")
    assert fired["rule"] == rid and fired["severity"] == severity
    escalation = home / "state" / "escalations" / f"{run_id}.md"
    assert escalation.is_file()
    assert rid in escalation.read_text()
    assert run_events(home, run_id, "escalated")
    assert model_server.chat_requests("critic_verdict") == []


def test_a_refuse_rule_keeps_refusing_run_after_run(tmp_path: Path, model_server: Any) -> None:
    """A person's refusal is not "harm": refused runs must not retire the rule that refused."""
    home, marker = setup_home(tmp_path, model_server, {"calc": {"task": TASK_A}})
    rid = seed(
        home,
        "active",
        severity="refuse",
        trigger_intent="Tasks that touch calc.py",
        trigger_patterns=[r"(?i)\bcalc\.py\b"],
        rule="Do not let an agent change `calc.py`: the finance team owns it.",
    )
    outcomes = [once(home, "calc")[2]["outcome"] for _ in range(3)]
    assert (home / "rules" / "active" / f"{rid}.md").is_file(), sorted(
        p.relative_to(home).as_posix() for p in (home / "rules").rglob("*.md")
    )
    assert outcomes == ["refused", "refused", "refused"]
    assert not marker.exists()


def test_a_rule_learned_from_the_last_attempt_is_not_charged_for_that_run(
    tmp_path: Path, model_server: Any
) -> None:
    """The rule reached no prompt in the run it came from: no firing, no harm."""
    home, _ = setup_home(tmp_path, model_server, {"calc": {"task": TASK_A, "max_attempts": 1}})
    model_server.add({"json": LEARNED}, name="postmortem_rule")
    model_server.add({"json": AGREES}, name="rule_verification")
    code, run_id, run = once(home, "calc")
    assert code == 1 and run["outcome"] == "escalated"
    [rid] = [p.stem for p in (home / "rules" / "trial").glob("*.md")]
    front = rule_file(home, "trial", rid)
    assert (front["fired"], front["helped"], front["harmed"]) == (0, 0, 0)
    assert run["rules_fired"] == []
    assert run_events(home, run_id, "rule_fired") == []


def test_a_learned_rule_goes_into_the_next_prompt_even_when_its_patterns_miss_the_task(
    tmp_path: Path, model_server: Any
) -> None:
    """DESIGN 4.5: a verified rule lands in trial/ and goes into the next attempt's prompt.

    The post-mortem is told to write patterns for future tasks, not this one, so its
    patterns may well miss the task it was learned from.
    """
    home, _ = setup_home(tmp_path, model_server, {"calc": {"task": TASK_A, "max_attempts": 2}})
    future_only = {**LEARNED, "trigger_patterns": [r"(?i)\bledger\b"]}
    model_server.add({"json": future_only}, name="postmortem_rule")
    model_server.add({"json": AGREES}, name="rule_verification")
    code, run_id, run = once(home, "calc")
    second = (home / "state" / "runs" / run_id / "attempt-2" / "prompt.md").read_text()
    assert LEARNED["rule"] in second
    assert code == 0 and run["outcome"] == "succeeded"
