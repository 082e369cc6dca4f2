"""The four kinds of knowledge end to end: failure, decision, knowledge, skill.

Real `loopd once` runs on a real repository, a `command` agent, and `[verifier]` on the
scripted model server (replies in the schemas loopd asks for). In its first run the agent
fails, is taught a `failure` rule by the post-mortem, fixes the right file in its second
attempt and, on the way, uses loopd's tools: it has loopd run two commands for it
(`record_evidence`), records a decision (`record_decision`) and notes a fact and a procedure
(`note_knowledge`), each through `loopd-tool` on its PATH: the real desk of the attempt
writes decisions.md and evidence.jsonl and hands the notes to the rule verifier. Each kind is
then learned and verified,
fires on two other loops' tasks, is promoted by a passing run of one and retired after
failing runs of the other.
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import Any

from daemon.rules.decisionlog import read_decisions
from daemon.rules.runevidence import EVIDENCE_FILE
from tests.helpers import events, loopd, make_home, make_repo, stored_text, transcript_text
from tests.model_server import call_name
from tests.test_learning_e2e import AGREES, CRITIC, GENERIC_SKILL, LEARNED, REPO, RULE_MARK

TEACH = "Make check.py pass: add in calc.py returns the wrong sum."
PROMOTE = "The sums are wrong: repair calc.py so that python3 check.py exits 0."
DEMOTE = "Tidy calc.py so that python3 check.py and python3 strict.py both pass."
DECISION = {
    "title": "Leave `legacy/` alone and fix calc.py at the top level",
    "why": "check.py runs `from calc import add`, so legacy/calc.py is never imported.",
    "alternatives": "Patch both copies of `add`.",
}
KNOWLEDGE = {
    "kind": "knowledge",
    "text": "check.py asserts `add(2, 3) == 5` through `from calc import add`.",
    "why": "`cat check.py` printed `from calc import add` and `assert add(2, 3) == 5`.",
    "paths": ["check.py"],
}
SKILL = {
    "kind": "skill",
    "text": "After editing calc.py, run `python3 check.py`: it passes once `add` returns `a + b`.",
    "why": "`python3 check.py` failed with `add(2, 3) gave -1` while calc.py returned `a - b`.",
    "paths": ["calc.py"],
}
# The agent: each tool call is `loopd-tool`, its answer a `TOOL` line of the transcript.
AGENT = """\
import pathlib, subprocess, sys
prompt = sys.stdin.read()

def tool(name, **args):
    argv = ["loopd-tool", name.replace("_", "-")]
    for key, value in args.items():
        for one in value if isinstance(value, list) else [value]:
            argv += ["--" + key, one]
    done = subprocess.run(argv, capture_output=True, text=True)
    out = (done.stdout.strip() or done.stderr.strip()).replace("\\n", " | ")
    print(f"TOOL {name} {done.returncode} {out[:300]}", flush=True)

rules = ""
if "# Rules from earlier runs" in prompt:
    rules = prompt.split("# Rules from earlier runs", 1)[1].split("\\n# ", 1)[0]
if RULE_MARK not in rules:
    p = pathlib.Path("legacy/calc.py")
    p.write_text(p.read_text().replace("a - b", "a + b"))
    print("patched legacy/calc.py and left calc.py alone")
    sys.exit(0)
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
print("fixed add in calc.py as the rule says")
if TEACH in prompt:
    tool("record_evidence", claim="check.py imports add from calc", command="cat check.py")
    tool("record_evidence", claim="the check passes now", command="python3 check.py")
    tool("record_decision", **DECISION)
    for note in (KNOWLEDGE, SKILL):
        tool("note_knowledge", **note)
"""


def replies(body: dict[str, Any]) -> Any:
    """The verifier model: a lenient critic, no intent match, agreeing verification."""
    name = call_name(body)
    if name == "critic_verdict" and TEACH in json.dumps(body):
        # The run that teaches them says nothing of the rules: they count `fired` alone.
        return {"json": {**CRITIC, "rules_followed": [], "rules_irrelevant": []}}
    if name == "critic_verdict":
        return {"json": CRITIC}  # the server marks every rule it was told of as followed
    if name == "trigger_matches":
        return {"json": {"matches": []}}
    if name == "postmortem_rule":
        return {"json": GENERIC_SKILL}  # generic: rejected without a model call
    if name == "rule_verification":
        return {"json": AGREES}
    return {"status": 400, "message": f"the test did not expect a {name} call"}


def setup(tmp_path: Path, server: Any) -> Path:
    server.script(replies)
    script = tmp_path / "agent.py"
    constants = {
        "RULE_MARK": RULE_MARK, "TEACH": TEACH, "DECISION": DECISION, "KNOWLEDGE": KNOWLEDGE,
        "SKILL": SKILL,
    }  # fmt: skip
    head = "".join(f"{k} = {v!r}\n" for k, v in constants.items())
    script.write_text(head + AGENT)
    argv = [sys.executable, str(script)]
    config = (
        f'[verifier]\nbase_url = "{server.base_url}"\nmodel = "critic-model"\n'
        'timeout = "20s"\njudge_timeout = "20s"\npending_limit = "30s"\n\n'
        f'[agents.fixer]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'
    )
    repo = make_repo(
        tmp_path / "repo", {**REPO, "strict.py": "raise SystemExit('strict: not tidy yet')\n"}
    )
    loops = {}
    for name, task, attempts, checks in (
        ("teach", TEACH, 2, ["python3 check.py"]),
        ("sums", PROMOTE, 1, ["python3 check.py"]),
        ("strict", DEMOTE, 1, ["python3 check.py", "python3 strict.py"]),
    ):
        loops[name] = (
            f'repo = "{repo}"\nagent = "fixer"\ntask = {json.dumps(task)}\n'
            f"done_when = {json.dumps(checks)}\nmax_attempts = {attempts}\n"
            'attempt_timeout = "90s"\nstall_after = "60s"\nmax_nudges = 0\n'
        )
    return make_home(tmp_path / "home", config, loops)


def once(home: Path, loop: str) -> tuple[str, dict[str, Any]]:
    proc = loopd(home, "once", loop, timeout=180)
    assert proc.stdout, proc.stderr
    run_id = proc.stdout.splitlines()[0]
    return run_id, tomllib.loads((home / "state/runs" / run_id / "run.toml").read_text())


def tool_lines(home: Path, run_id: str, attempt: int) -> list[str]:
    """The agent's `TOOL name exit answer` lines in an attempt's transcript."""
    transcript = transcript_text(home / "state/runs" / run_id / f"attempt-{attempt}")
    said = [json.loads(line).get("text", "") for line in transcript.splitlines()]
    return [text for text in said if text.startswith("TOOL ")]


def library(home: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every rule file: id -> (status, front matter)."""
    out = {}
    for path in (home / "rules").glob("*/*.md"):
        out[path.stem] = (path.parent.name, tomllib.loads(path.read_text().split("+++")[1]))
    return out


def test_each_kind_is_learned_verified_fired_elsewhere_promoted_and_retired(
    tmp_path: Path, model_server: Any
) -> None:
    home = setup(tmp_path, model_server)
    model_server.add({"json": LEARNED}, name="postmortem_rule")

    # 1. Learned: the failure from attempt 1's post-mortem; the knowledge and the skill from
    # the agent's notes in attempt 2; the decision when the run succeeded.
    run_id, run = once(home, "teach")
    assert run["outcome"] == "succeeded", run
    said = tool_lines(home, run_id, 2)
    assert [line.split()[1:3] for line in said] == [
        ["record_evidence", "0"], ["record_evidence", "0"], ["record_decision", "0"],
        ["note_knowledge", "0"], ["note_knowledge", "0"],
    ], said  # fmt: skip
    assert all("Filed as" in line for line in said[3:]), said
    calls = [e for e in events(home) if e.get("run") == run_id]
    noted = [e["decision"] for e in calls if e["type"] == "knowledge_noted"]
    assert noted == ["accepted", "accepted"], calls
    assert [e["exit_code"] for e in calls if e["type"] == "evidence_recorded"] == [0, 0]
    assert not [e for e in calls if e["type"] == "desk_refused"], calls
    evidence = (home / "state/runs" / run_id / EVIDENCE_FILE).read_text().splitlines()
    assert [json.loads(x)["command"] for x in evidence] == ["cat check.py", "python3 check.py"]
    [decision] = read_decisions(home / "state/runs" / run_id)
    assert (decision.title, decision.why) == (DECISION["title"], DECISION["why"])
    rules = library(home)
    by_kind = {front["kind"]: rid for rid, (_, front) in rules.items() if front.get("kind")}
    learned = {k: by_kind[k] for k in ("failure", "decision", "knowledge", "skill")}
    for kind, rid in learned.items():
        status, front = rules[rid]
        # 2. Verified: grounded, no duplicate, and the verifier model agreed; in trial.
        assert status == "trial", (kind, status, front.get("reason"))
        assert front["verified_by"] == ["grounding", "duplicates", "model:critic-model"], kind
        assert front["source_run"] == run_id and front["source_task"] == TEACH
        assert front["scope"]["repos"] == [str((tmp_path / "repo").resolve())]
        for entry in front["evidence"]:  # each entry resolves under state/
            lines = stored_text(home / "state" / entry["path"]).splitlines()
            assert entry["quote"] in lines[entry["line"] - 1], (kind, entry)
    skill = rules[learned["skill"]][1]
    assert skill["verified_with"]["command"] == "python3 check.py"
    assert skill["verified_with"]["exit_code"] == 0
    assert skill["verified_with"]["where"] == f"runs/{run_id}/{EVIDENCE_FILE}"
    assert rules[learned["decision"]][1]["evidence"][0]["path"] == f"runs/{run_id}/decisions.md"
    accepted = [e for e in events(home) if e["type"] == "rule_accepted" and e["run"] == run_id]
    assert sorted(e["kind"] for e in accepted) == ["decision", "failure", "knowledge", "skill"]
    asked = json.dumps(model_server.chat_requests("rule_verification"))
    assert "check.py asserts" in asked and "Leave `legacy/` alone" in asked

    # 3. Fired on another task, followed in a passing run: each is promoted to active.
    promote_id, run = once(home, "sums")
    assert run["outcome"] == "succeeded"
    assert sorted(run["rules_fired"]) == sorted(learned.values())
    prompt = (home / "state/runs" / promote_id / "attempt-1/prompt.md").read_text()
    assert all(text in prompt for text in (DECISION["title"], KNOWLEDGE["text"], SKILL["text"]))
    rules = library(home)
    for kind, rid in learned.items():
        status, front = rules[rid]
        assert status == "active", (kind, front.get("reason"))
        fired = 2 if kind == "failure" else 1  # the failure fired in attempt 2 of its own run
        assert (front["fired"], front["helped"], front["harmed"]) == (fired, 1, 0), kind
        assert front["reason"] == "followed in a passing run of loop sums"
    promoted = [e for e in events(home) if e["type"] == "rule_promoted"]
    assert sorted((e["kind"], e["to"]) for e in promoted) == sorted((k, "active") for k in learned)

    # 4. Fired on a third task and followed in failing runs: harmed until retired.
    for _ in range(3):
        demote_id, run = once(home, "strict")
        assert run["outcome"] == "escalated" and sorted(run["rules_fired"]) == sorted(
            learned.values()
        )
    rules = library(home)
    for kind, rid in learned.items():
        status, front = rules[rid]
        assert status == "retired", (kind, status)
        assert front["reason"] == "harmed 3 runs and helped 1", (kind, front["reason"])
    demoted = [e for e in events(home) if e["type"] == "rule_demoted"]
    assert sorted((e["kind"], e["from"], e["to"]) for e in demoted) == sorted(
        (k, "active", "retired") for k in learned
    )

    # `loopd rules list` keeps the kinds apart, retired ones included.
    listed = loopd(home, "rules", "list", "--all").stdout
    headings = [line.split(" (")[0] for line in listed.splitlines() if line[:1].isalpha()]
    assert headings == ["failure", "decision", "knowledge", "skill"], listed
    assert "verified with `python3 check.py` (exit 0)" in listed
