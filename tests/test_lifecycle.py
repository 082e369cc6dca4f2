"""One run lifecycle on both engines: a retry's base and landing, learning after a pass.

Each test runs on the local engine and on Temporal (tests/test_engines.py's fixtures), as real
`loopd` processes on real repositories.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.helpers import git, wait_for
from tests.machines import Machine, engine_toml
from tests.test_engines import FIX, IDLE, engine, finished, machines, make_machine, script_agent

__all__ = ["engine", "machines"]  # fixtures, imported for pytest

# The agent leaves half its work the first time; finds it on its branch and finishes it then.
STEPWISE = (
    "import pathlib\n"
    "if pathlib.Path('progress.txt').exists():\n"
    "    " + FIX.replace("; ", "\n    ") + "\n"
    "else:\n"
    "    pathlib.Path('progress.txt').write_text('half done\\n')\n"
)


def settled(machine: Machine, count: int) -> list[dict[str, Any]]:
    """The runs, once `count` have ended and finished (landing included)."""
    found = finished(machine, count)
    return found if all("event" in r.get("finish_done", []) for r in found) else []


def test_a_retry_builds_on_the_escalated_runs_branch_and_lands_on_the_target(
    tmp_path: Path, engine: str, machines: list
) -> None:
    machine = make_machine(tmp_path, engine, script_agent(STEPWISE), land="merge")
    machines.append(machine)
    machine.start("run")
    proc = machine.loopd("trigger", "calc", "--wait")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    first = proc.stdout.splitlines()[0]
    resolved = machine.loopd("escalations", "resolve", first, "--retry")
    assert resolved.returncode == 0, resolved.stderr
    retry_id = resolved.stdout.splitlines()[1]
    done = wait_for(lambda: settled(machine, 2), timeout=90, what="the retry landed")
    (retry,) = [r for r in done if r["id"] == retry_id]
    assert (retry["outcome"], retry["trigger"]["retry_of"]) == ("succeeded", first)
    assert (retry["land"], retry["target"]) == ("merge", "main")
    assert retry["landed"] is True, retry.get("landing")
    assert "a + b" in git(machine.repo, "show", "main:calc.py")
    assert git(machine.repo, "show", "main:progress.txt") == "half done"
    assert len(machine.runs()) == 2
    assert machine.stop() == 0


def test_a_first_try_pass_takes_up_lessons_deferred_while_the_model_was_down(
    tmp_path: Path, engine: str, machines: list, model_server: Any
) -> None:
    from daemon.runs.learning import DEFERRED, DeferredLesson
    from daemon.state.store import dump_toml
    from tests.test_learning_e2e import AGREES, default_reply

    model_server.script(default_reply)
    model_server.add({"json": AGREES}, name="rule_verification")
    verifier = (
        f'[verifier]\nbase_url = "{model_server.base_url}"\nmodel = "critic-model"\n'
        'timeout = "20s"\njudge_timeout = "20s"\npending_limit = "30s"\n'
    )
    machine = make_machine(tmp_path, engine, script_agent(FIX), verifier)
    machines.append(machine)
    machine.start("run")
    proc = machine.loopd("trigger", "calc", "--wait")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    earlier = proc.stdout.splitlines()[0]
    # Its lesson waited for the model (loopd was started after the housekeeper's look).
    lesson = DeferredLesson(
        run=earlier, loop="calc", attempt=1, kind_hint="skill", created=datetime.now(UTC)
    )
    deferred = machine.home / "state" / DEFERRED / f"{earlier}-1.toml"
    deferred.parent.mkdir(parents=True, exist_ok=True)
    deferred.write_text(dump_toml(lesson))
    proc = machine.loopd("trigger", "calc", "--wait", "--force")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    later = next(r for r in machine.runs() if r["id"] == proc.stdout.splitlines()[0])
    assert [a["n"] for a in later["attempts"]] == [1] and later["outcome"] == "succeeded"
    (taken,) = wait_for(lambda: machine.events("rule_deferred_learned"), what="the lesson")
    assert taken["run"] == earlier and not deferred.exists()
    assert machine.stop() == 0


def test_a_worker_on_the_homes_own_home_leaves_its_inbox_to_loopd_run(
    tmp_path: Path, temporal: Any, machines: list
) -> None:
    server, namespace = temporal
    machine = make_machine(tmp_path, engine_toml(server.address, namespace), script_agent(IDLE))
    machines.append(machine)
    machine.start("run")
    machine.start("worker")
    proc = machine.loopd("trigger", "calc", "--wait")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    first = proc.stdout.splitlines()[0]
    # The request is a file in the home's inbox, which both processes watch.
    resolved = machine.loopd("escalations", "resolve", first, "--retry")
    assert resolved.returncode == 0, resolved.stderr
    retry_id = resolved.stdout.splitlines()[1]
    wait_for(lambda: settled(machine, 2), timeout=120, what="the retry")
    assert not list((machine.home / "state" / "inbox").glob("*.json"))
    (asked,) = machine.events("escalation_resolved")
    taken = [e for e in machine.events("trigger") if e.get("inbox") == asked["trigger"]]
    assert [e["run"] for e in taken] == [retry_id]
    retries = [r["id"] for r in machine.runs() if r["trigger"]["kind"] == "retry"]
    assert retries == [retry_id] and len(machine.runs()) == 2
    for proc in reversed(machine.procs):
        proc.terminate()
        assert proc.wait(timeout=60) == 0
