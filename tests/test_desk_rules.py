"""The rules the agent asks for with `rules_for` count as fired in its run, as the ones its
prompt held do: in run.toml's `rules_fired` (once each), a `rule_fired` event, and the rules'
counters when the run ends. A real `loopd once` with a `command` agent calling `loopd-tool`."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import tomli_w

from tests.helpers import events, loopd, make_home, make_repo, transcript_text
from tests.test_desk_tools import BUGGY

AGENT = r"""
import pathlib, subprocess
p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))
r = subprocess.run(['loopd-tool', 'rules-for', '--task', 'let add in check.py take strings',
                    '--paths', 'calc.py'], capture_output=True, text=True)
print('TOOL', r.returncode, (r.stdout or r.stderr).replace('\n', ' | ')[:600], flush=True)
"""


def rule_text(rule_id: str, pattern: str) -> str:
    return (
        f'+++\nid = "{rule_id}"\nkind = "knowledge"\nseverity = "remind"\n'
        f'trigger_intent = ""\ntrigger_patterns = [{json.dumps(pattern)}]\n+++\n'
        f"**Rule:** Rule {rule_id}: keep `add` pure.\n\n**Why:** An earlier run.\n\n"
        "**How to apply:** Read calc.py first.\n"
    )


def front(path: Path) -> dict:
    return tomllib.loads(path.read_text().split("+++")[1])


def test_rules_the_agent_asked_for_count_as_fired_once(tmp_path: Path) -> None:
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
    active = home / "rules" / "active"
    # Fires for the loop's task (in the prompt) and again for the agent's question.
    (active / "r-0001-check.md").write_text(rule_text("r-0001-check", r"check\.py"))
    # Fires only for the agent's question.
    (active / "r-0002-strings.md").write_text(rule_text("r-0002-strings", r"\bstrings\b"))

    proc = loopd(home, "once", "calc", timeout=300)
    run_id = proc.stdout.splitlines()[0].strip()
    run_dir = home / "state" / "runs" / run_id
    run = tomllib.loads((run_dir / "run.toml").read_text())
    assert run["outcome"] == "succeeded", (run.get("reason"), proc.stderr[-3000:])
    transcript = transcript_text(run_dir / "attempt-1")
    assert "r-0002-strings" in transcript and "r-0001-check" in transcript, transcript[-2000:]

    # Each counted once: the one the prompt held is not added again.
    assert run["rules_fired"] == ["r-0001-check", "r-0002-strings"]
    mine = [e for e in events(home) if e.get("run") == run_id]
    fired = [(e["rule"], e["why"]) for e in mine if e["type"] == "rule_fired"]
    assert fired == [("r-0001-check", "pattern"), ("r-0002-strings", "asked")], fired
    [asked] = [e for e in mine if e["type"] == "rules_asked"]
    assert asked["rules"] == ["r-0001-check", "r-0002-strings"]
    # The run's outcome counted for both, once each, as for any rule that fired.
    for rule_id in ("r-0001-check", "r-0002-strings"):
        [path] = list((home / "rules").glob(f"*/{rule_id}.md"))
        assert front(path)["fired"] == 1, (rule_id, front(path))
