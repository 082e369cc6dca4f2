"""Each of the agent's tools and its effect, through `loopd-tool` on a `command` agent's PATH
in a real `loopd once` (in the sandbox where bubblewrap runs)."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import tomli_w

from tests.helpers import loopd, make_home, make_repo, transcript_text

BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5\nprint('check ok')\n",
}

AGENT = r"""
import pathlib, subprocess
p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))
def tool(*args):
    r = subprocess.run(['loopd-tool', *args], capture_output=True, text=True)
    out = (r.stdout.strip() or r.stderr.strip()).replace('\n', ' | ')
    print(f'TOOL {args[0]} {r.returncode} {out[:400]}', flush=True)
tool('record-decision', '--title', 'Fix in place', '--why', 'the bug is one operator',
     '--alternatives', 'rewrite calc.py')
tool('record-evidence', '--claim', 'check.py passes', '--command', 'python3 check.py')
tool('record-evidence', '--claim', 'the build is green', '--command', 'exit 3')
tool('ask-person', '--question', 'Should add() accept strings too?')
tool('rules-for', '--task', 'fix add in calc.py', '--paths', 'calc.py')
print('calc.py: add() returned a - b before the fix', flush=True)
tool('note-knowledge', '--kind', 'knowledge', '--text', 'add() in calc.py must return a + b',
     '--why', 'loopd printed `check ok` for python3 check.py')
tool('record-decision', '--title', 'no why')
"""


def test_each_tool_does_its_work_and_is_an_event(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    config = '[agents.fixer]\nadapter = "command"\n'
    config += f"command = {json.dumps([sys.executable, '-c', AGENT])}\n"
    loop = {
        "repo": str(repo),
        "task": "Make check.py pass.",
        "agent": "fixer",
        "done_when": ["python3 check.py"],
        "attempt_timeout": "300s",
        "stall_after": "300s",
        "max_attempts": 1,
    }
    home = make_home(tmp_path / "home", config, {"calc": tomli_w.dumps(loop)})
    proc = loopd(home, "once", "calc", timeout=300)
    run_id = proc.stdout.splitlines()[0].strip()
    run_dir = home / "state" / "runs" / run_id
    run = tomllib.loads((run_dir / "run.toml").read_text())
    assert run["outcome"] == "succeeded", (run.get("reason"), proc.stderr[-3000:])

    transcript = transcript_text(run_dir / "attempt-1")
    said = [json.loads(line).get("text", "") for line in transcript.splitlines()]
    answers = {t.split()[1] + str(i): t for i, t in enumerate(said) if t.startswith("TOOL ")}
    text = "\n".join(answers.values())
    assert "TOOL record-decision 0 Recorded" in text
    assert "TOOL record-decision 1 record_decision: bad arguments: why: Field required" in text

    # record_decision: decisions.md, in the critic's evidence and `loopd show`.
    decisions = (run_dir / "decisions.md").read_text()
    assert "## Fix in place" in decisions and "Alternatives: rewrite calc.py" in decisions
    from daemon.rules.decisionlog import read_decisions

    [decision] = read_decisions(run_dir)  # as the learning side reads it
    assert (decision.title, decision.why) == ("Fix in place", "the bug is one operator")
    # record_evidence: loopd ran each command on a commit of the work; one line each.
    lines = [json.loads(x) for x in (run_dir / "evidence.jsonl").read_text().splitlines()]
    assert [(x["claim"], x["exit_code"], x["refuted"]) for x in lines] == [
        ("check.py passes", 0, False),
        ("the build is green", 3, True),
    ]
    assert "check ok" in lines[0]["output_tail"]
    assert "the claim is REFUTED" in text
    # ask_person: an escalation of cause `question`; the run went on and succeeded.
    question = home / "state" / "escalations" / f"{run_id}-q1.md"
    body = question.read_text()
    assert 'cause = "question"' in body and "Should add() accept strings too?" in body
    # rules_for: none in this home.
    assert "TOOL rules-for 0 No rules from earlier runs apply" in text
    # note_knowledge: loopd learns no rule without its verifier model, and this home has
    # none: the note is not taken, the agent is told why, nothing is filed.
    assert list((home / "rules" / "active").iterdir()) == []
    assert list((home / "rules" / "trial").iterdir()) == []
    assert "TOOL note-knowledge 1 note_knowledge: not taken now: no [verifier]" in text

    events = [json.loads(x) for x in (home / "state" / "events.jsonl").read_text().splitlines()]
    kinds = [e["type"] for e in events if e.get("run") == run_id]
    for kind in (
        "desk_opened",
        "decision_recorded",
        "evidence_recorded",
        "person_asked",
        "rules_asked",
        "knowledge_noted",
        "desk_refused",
    ):
        assert kind in kinds, kind
    [opened] = [e for e in events if e["type"] == "desk_opened"]
    assert opened["tools"] == ["cli"]

    shown = loopd(home, "show", run_id).stdout
    assert "the agent's evidence" in shown and "REFUTED" in shown and "Fix in place" in shown
