"""The agent's tools on both engines: a run whose `command` agent calls `loopd-tool
record-decision` and `record-evidence` ends with `decisions.md` and the evidence line in the
home's `state/runs/RUN_ID/`, with the local engine and with Temporal (the home's own worker
runs the attempt, on the same machine)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import transcript_text, wait_for
from tests.test_desk_rules import rule_text
from tests.test_engines import FIX, engine, machines, make_machine, script_agent  # noqa: F401
from tests.test_handoff_e2e import NOTIFIER, notified

TOOLS = FIX + (
    "\nimport subprocess\n"
    "for argv in (['record-decision', '--title', 'Fix in place', '--why', 'one operator'],\n"
    "             ['record-evidence', '--claim', 'check.py passes', '--command',\n"
    "              'python3 check.py'],\n"
    "             ['rules-for', '--task', 'let add take strings', '--paths', 'calc.py']):\n"
    "    r = subprocess.run(['loopd-tool', *argv], capture_output=True, text=True)\n"
    "    print('TOOL', argv[0], r.returncode, (r.stdout or r.stderr).strip()[:300], flush=True)\n"
)


def test_the_agents_decisions_and_evidence_land_in_the_homes_run_folder(
    tmp_path: Path,
    engine: str,  # noqa: F811
    machines: list,  # noqa: F811
) -> None:
    machine = make_machine(tmp_path, engine, script_agent(TOOLS))
    machines.append(machine)
    # A rule only the agent's own question selects: it counts in the home's run.toml.
    rule = rule_text("r-0002-strings", r"\bstrings\b")
    (machine.home / "rules" / "active" / "r-0002-strings.md").write_text(rule)
    machine.start("run")
    proc = machine.loopd("trigger", "calc", "--wait")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    run_dir = machine.home / "state" / "runs" / run_id
    transcript = transcript_text(run_dir / "attempt-1")
    assert "TOOL record-evidence 0" in transcript, transcript[-3000:]
    assert "TOOL record-decision 0" in transcript, transcript[-3000:]
    [line] = [json.loads(x) for x in (run_dir / "evidence.jsonl").read_text().splitlines()]
    assert (line["claim"], line["command"], line["exit_code"]) == (
        "check.py passes",
        "python3 check.py",
        0,
    )
    assert line["refuted"] is False and line["commit"]
    decisions = (run_dir / "decisions.md").read_text()
    assert "## Fix in place" in decisions and "one operator" in decisions
    shown = machine.loopd("show", run_id).stdout
    assert "Fix in place" in shown and "check.py passes" in shown
    assert "r-0002-strings" in transcript, transcript[-3000:]
    [run] = [r for r in machine.runs() if r["id"] == run_id]
    assert run["rules_fired"] == ["r-0002-strings"], run
    assert machine.stop() == 0


ASK = FIX + (
    "\nimport subprocess\n"
    "r = subprocess.run(['loopd-tool', 'ask-person', '--question', 'May I rename calc.py?'],\n"
    "                   capture_output=True, text=True)\n"
    "print('TOOL ask-person', r.returncode, (r.stdout or r.stderr).strip()[:300], flush=True)\n"
)


def test_the_agents_question_is_filed_and_notified_once(
    tmp_path: Path,
    engine: str,  # noqa: F811
    machines: list,  # noqa: F811
) -> None:
    script = tmp_path / "notifier.py"
    script.write_text(NOTIFIER)
    out = tmp_path / "notified.jsonl"
    notify = f"\n[notify]\ncommand = {json.dumps(['python3', str(script), str(out)])}\n"
    machine = make_machine(tmp_path, engine, script_agent(ASK), notify, notify_on=[])
    machines.append(machine)
    machine.start("run")
    proc = machine.loopd("trigger", "calc", "--wait")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    question = machine.home / "state" / "escalations" / f"{run_id}-q1.md"
    assert "May I rename calc.py?" in question.read_text()
    sent = wait_for(lambda: notified(out), timeout=60, what="the question's notification")
    assert machine.stop() == 0
    assert len(notified(out)) == 1, notified(out)  # one question, one notification
    assert "asks a person: May I rename calc.py?" in sent[0][-1]
