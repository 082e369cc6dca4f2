"""The agent's tools on a worker of another machine (Temporal): its decisions, evidence and
questions reach the home's state/ once each, through the attempt's result; its knowledge
notes are refused there with a clear answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers import transcript_text, wait_for
from tests.machines import BUGGY, command_agent, make_cluster
from tests.test_temporal_engine import LOOP, finished

# Attempt 1 records a decision and a claim that fails, and leaves the bug; attempt 2 (told by
# the file attempt 1 left in the tree) fixes it, records again, asks a person, notes knowledge.
AGENT = """
import pathlib, subprocess
def tool(*argv):
    r = subprocess.run(['loopd-tool', *argv], capture_output=True, text=True)
    print('TOOL', argv[0], r.returncode, (r.stdout or r.stderr).strip()[:400], flush=True)
mark = pathlib.Path('tried.txt')
if not mark.exists():
    mark.write_text('tried once\\n')
    tool('record-decision', '--title', 'Look first', '--why', 'understand the bug')
    tool('record-evidence', '--claim', 'check.py passes already', '--command',
         'python3 check.py')
else:
    p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))
    tool('record-decision', '--title', 'Fix in place', '--why', 'one operator')
    tool('record-evidence', '--claim', 'check.py passes', '--command', 'python3 check.py')
    tool('ask-person', '--question', 'May I rename calc.py?')
    tool('note-knowledge', '--kind', 'knowledge', '--text', 'add lives in calc.py',
         '--why', 'seen while fixing', '--paths', 'calc.py')
"""


def test_a_remote_workers_desk_records_land_once_in_the_homes_state(
    tmp_path: Path, temporal: Any
) -> None:
    server, namespace = temporal
    loop = {**LOOP, "max_attempts": 2}
    agents = command_agent("a", AGENT)
    cluster = make_cluster(tmp_path, server.address, namespace, BUGGY, agents, loop, workers=1)
    home, worker = cluster.home, cluster.workers[0]
    try:
        home.start("run")
        worker.start("worker", "--queue", "gpu")
        assert home.loopd("trigger", "calc").returncode == 0
        (run,) = wait_for(lambda: finished(home, 1), timeout=240, what="the run")
        assert run["outcome"] == "succeeded", run
        run_id = run["id"]
        there = worker.home / "state" / "runs" / run_id
        transcript = transcript_text(there / "attempt-2")
        assert "TOOL record-evidence 0" in transcript, transcript[-3000:]
        assert "TOOL ask-person 0" in transcript, transcript[-3000:]
        # The note is refused on this machine, and the agent is told why.
        assert "TOOL note-knowledge 1" in transcript, transcript[-3000:]
        assert "not taken: this attempt runs on a worker machine" in transcript
        assert not list((worker.home / "rules").rglob("r-*.md"))
        assert not list((home.home / "rules").rglob("r-*.md"))

        here = home.home / "state" / "runs" / run_id
        assert here != there and (there / "evidence.jsonl").exists()
        lines = [json.loads(x) for x in (here / "evidence.jsonl").read_text().splitlines()]
        got = [(x["attempt"], x["claim"], x["exit_code"], x["refuted"]) for x in lines]
        assert got == [
            (1, "check.py passes already", 1, True),
            (2, "check.py passes", 0, False),
        ], got
        decisions = (here / "decisions.md").read_text()
        assert decisions.count("## Look first") == 1 and decisions.count("## Fix in place") == 1
        assert decisions.index("## Look first") < decisions.index("## Fix in place")
        question = home.home / "state" / "escalations" / f"{run_id}-q1.md"
        assert "May I rename calc.py?" in question.read_text()
        assert not (home.home / "state" / "escalations" / f"{run_id}-q2.md").exists()
        asked = [e for e in home.events("person_asked") if e.get("run") == run_id]
        assert [e["file"] for e in asked] == [f"escalations/{run_id}-q1.md"], asked
        shown = home.loopd("show", run_id).stdout
        for text in ("Look first", "Fix in place", "check.py passes already", "one operator"):
            assert text in shown, shown
        listed = home.loopd("escalations").stdout
        assert run_id in listed and "question" in listed, listed
    finally:
        cluster.stop()


def test_records_land_once_when_landed_again_and_not_at_all_from_the_homes_own_state(
    tmp_path: Path,
) -> None:
    """attempt_ended may run twice (an activity's retry): the lines are already there, so
    nothing doubles; records from the home's own state/ (same home id) are never landed."""
    from datetime import UTC, datetime

    from daemon.engine.temporal.deskrecords import carried, land, marks
    from daemon.runparts.journal import RunJournal
    from daemon.state.agentrecords import EvidenceLine, append_decision, append_evidence
    from daemon.state.store import StateStore
    from tests.test_run_lifecycle import make_case

    case = make_case(tmp_path)
    run = case.new_run()
    case.store.save_run(run)
    journal = RunJournal(case.services, run)
    worker = StateStore(tmp_path / "worker-state")
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    append_decision(worker.run_dir(run.id), "## Before\nWhy: an earlier step\n\n")
    since = marks(worker, run.id)
    append_decision(worker.run_dir(run.id), "## Chosen\nWhy: this step\n\n")
    line = EvidenceLine(ts=now, attempt=2, claim="c", command="true", exit_code=0, refuted=False)
    append_evidence(worker.run_dir(run.id), line)
    records = carried(worker, run.id, since, [("Why?", now)], 2)
    assert "## Before" not in records.decisions and "## Chosen" in records.decisions
    for _ in range(2):
        land(case.services, journal, records)
    here = case.store.run_dir(run.id)
    assert (here / "decisions.md").read_text() == "## Chosen\nWhy: this step\n\n"
    assert len((here / "evidence.jsonl").read_text().splitlines()) == 1
    # The home's own state/: nothing is landed a second time.
    own = carried(case.store, run.id, (0, 0), [], 2)
    land(case.services, journal, own)
    assert len((here / "evidence.jsonl").read_text().splitlines()) == 1
    escalations = case.store.root / "escalations"
    assert (escalations / f"{run.id}-q1.md").exists()
    assert not (escalations / f"{run.id}-q2.md").exists()
