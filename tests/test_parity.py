"""The same scenarios on both engines, their run records compared field by field.

Each test makes two machines, one on the local engine and one on Temporal, drives both through
the same commands, and compares what each home's run.toml files say (tests/parity.py leaves
out ids, times, paths and pids).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.histories import record, recording
from tests.machines import Machine, engine_toml
from tests.parity import comparable, differences
from tests.test_engines import FIX, machines, make_machine, script_agent
from tests.test_lifecycle import STEPWISE, settled

__all__ = ["machines"]  # a fixture, imported for pytest


Setup = Callable[[Path, str], Machine]  # (the machine's folder, its engine) -> the machine


def plain(agent: str, config: str = "", **loop: Any) -> Setup:
    """A machine with loop `calc`, the same on both engines."""
    return lambda folder, engine: make_machine(folder, engine, agent, config, **loop)


def on_both(
    tmp_path: Path,
    temporal: Any,
    machines: list,
    setup: Setup,
    scenario: Callable[[Machine], int],
    known: frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """Run `scenario` (which returns how many runs it makes) on a local and a Temporal
    machine; fail on any field where their run records differ (but the `known` differences,
    by path); the local records. The temporal machine's scenario runs while the local
    machine's runs go on (a usage limit's wait, a retry), not after them."""
    server, namespace = temporal
    found = {}
    counts = {}
    started = {}
    for kind in ("local", "temporal"):
        engine = engine_toml(server.address, namespace) if kind == "temporal" else ""
        machine = setup(tmp_path / kind, engine)
        machines.append(machine)
        counts[kind] = scenario(machine)
        started[kind] = machine
    for kind, machine in started.items():
        wait_for_settled(machine, counts[kind])
        found[kind] = comparable(machine)
        if kind == "temporal" and recording():
            record(server.address, namespace, scenario_name())
        assert machine.stop() == 0
    local, other = found["local"], found["temporal"]
    assert len(local) == len(other), (local, other)
    diff = [line for line in differences(local, other) if line.split(":")[0] not in known]
    assert not diff, "local != temporal:\n" + "\n".join(diff)
    return local


def scenario_name() -> str:
    """The running test's scenario, as its recorded histories are named."""
    test = os.environ["PYTEST_CURRENT_TEST"].split("::")[-1].split(" ")[0]
    return (
        test.removeprefix("test_")
        .removesuffix("_is_recorded_alike")
        .removesuffix("_are_recorded_alike")
    )


def wait_for_settled(machine: Machine, count: int) -> None:
    from tests.helpers import wait_for

    wait_for(lambda: settled(machine, count), timeout=120, what=f"{count} runs finished")


def test_a_passing_run_is_recorded_alike(tmp_path: Path, temporal: Any, machines: list) -> None:
    def scenario(machine: Machine) -> int:
        machine.start("run")
        assert machine.loopd("trigger", "calc", "--wait").returncode == 0
        return 1

    (run,) = on_both(tmp_path, temporal, machines, plain(script_agent(FIX)), scenario)
    assert run["outcome"] == "succeeded"
    # The sandbox the attempt ran in, which the home's record names on both engines.
    local, other = (machine.runs()[0]["sandbox"] for machine in machines)
    assert local == other != ""


def test_a_retry_that_builds_on_an_escalated_branch_and_lands_is_recorded_alike(
    tmp_path: Path, temporal: Any, machines: list
) -> None:
    def scenario(machine: Machine) -> int:
        machine.start("run")
        proc = machine.loopd("trigger", "calc", "--wait")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        resolved = machine.loopd("escalations", "resolve", proc.stdout.split()[0], "--retry")
        assert resolved.returncode == 0, resolved.stderr
        return 2

    setup = plain(script_agent(STEPWISE), land="merge")
    first, retry = on_both(tmp_path, temporal, machines, setup, scenario)
    assert (first["outcome"], retry["outcome"], retry["landed"]) == ("escalated", "succeeded", True)
    assert retry["base_commit"] == first["attempts"][0]["head_commit"]


def test_build_on_last_success_is_recorded_alike(
    tmp_path: Path, temporal: Any, machines: list
) -> None:
    def scenario(machine: Machine) -> int:
        machine.start("run")
        for _ in range(2):
            proc = machine.loopd("trigger", "calc", "--wait")
            assert proc.returncode == 0, proc.stdout + proc.stderr
        return 2

    setup = plain(script_agent(FIX), build_on="last-success", skip_if_done=False)
    first, second = on_both(tmp_path, temporal, machines, setup, scenario)
    assert second["built_on"] == ["RUN1"] and second["base_commit"] != first["base_commit"]
    # Its agent changed nothing: its head is the commit it started from, not a copy of it.
    assert second["attempts"][0]["head_commit"] == second["base_commit"]


def test_a_refusal_by_rule_is_recorded_alike(tmp_path: Path, temporal: Any, machines: list) -> None:
    from daemon.rules.library import RuleLibrary
    from daemon.rules.rulefile import Rule

    rule = Rule(
        rule="Do not let an agent change `calc.py`: the finance team owns it.",
        why="A person decided so.",
        how_to_apply="Do it.",
        severity="refuse",
        trigger_intent="Tasks that touch calc.py",
        trigger_patterns=[r"(?i)\bcalc\.py\b"],
    )

    def setup(folder: Path, engine: str) -> Machine:
        machine = make_machine(folder, engine, script_agent(FIX))
        RuleLibrary(machine.home / "rules").add(rule, "active")
        return machine

    def scenario(machine: Machine) -> int:
        machine.start("run")
        assert machine.loopd("trigger", "calc", "--wait").returncode == 1
        return 1

    (run,) = on_both(tmp_path, temporal, machines, setup, scenario)
    assert (run["outcome"], run["cause"], run["attempts"]) == ("refused", "refused", [])


def test_learning_after_a_first_try_pass_is_recorded_alike(
    tmp_path: Path, temporal: Any, machines: list, model_server: Any
) -> None:
    from tests.test_learning_e2e import default_reply

    model_server.script(default_reply)
    verifier = (
        f'[verifier]\nbase_url = "{model_server.base_url}"\nmodel = "critic-model"\n'
        'timeout = "20s"\njudge_timeout = "20s"\npending_limit = "30s"\n'
    )

    def scenario(machine: Machine) -> int:
        machine.start("run")
        assert machine.loopd("trigger", "calc", "--wait").returncode == 0
        return 1

    setup = plain(script_agent(FIX), verifier, critic="on", max_attempts=2)
    (run,) = on_both(tmp_path, temporal, machines, setup, scenario)
    assert run["outcome"] == "succeeded" and run["attempts"][0]["judged"] is True


def test_an_interrupted_run_and_its_retry_are_recorded_alike(
    tmp_path: Path, temporal: Any, machines: list
) -> None:
    import os
    import signal

    from tests.helpers import processes_with, talk, unique_token, wait_for

    def setup(folder: Path, engine: str) -> Machine:
        folder.mkdir(parents=True, exist_ok=True)
        talked, writable = talk(folder)
        # The first call hangs (killed with loopd); the retry's fixes.
        script = (
            f"# parity-{folder.name}-{unique_token('run', tmp_path)}\n"
            "import pathlib, time\n"
            f"marker = pathlib.Path({str(talked / 'started')!r})\n"
            "if not marker.exists():\n"
            "    marker.write_text('yes')\n"
            "    time.sleep(600)\n" + FIX.replace("; ", "\n") + "\n"
        )
        return make_machine(folder, engine, script_agent(script), writable)

    def scenario(machine: Machine) -> int:
        machine.start("run")
        assert machine.loopd("trigger", "calc").returncode == 0
        wait_for((machine.root.parent / "talk" / "started").exists, timeout=60)
        machine.kill9()
        machine.start("run")
        return 2

    try:
        first, retry = on_both(tmp_path, temporal, machines, setup, scenario)
    finally:
        for pid in processes_with(unique_token("run", tmp_path)):
            os.kill(pid, signal.SIGKILL)
    assert (first["outcome"], first["cause"]) == ("interrupted", "interrupted")
    assert (retry["trigger"]["retry_of"], retry["outcome"]) == ("RUN1", "succeeded")


def test_a_run_parked_on_a_usage_limit_is_recorded_alike(
    tmp_path: Path, temporal: Any, machines: list
) -> None:
    from tests.helpers import talk

    def setup(folder: Path, engine: str) -> Machine:
        folder.mkdir(parents=True, exist_ok=True)
        talked, writable = talk(folder)
        # A 429 with Retry-After: 1 s on the first call: the run parks and resumes a minute
        # past that (the reset margin), and the same attempt goes on.
        script = (
            "import pathlib, sys\n"
            f"calls = pathlib.Path({str(talked / 'calls')!r})\n"
            "first = not calls.exists()\n"
            "calls.write_text(calls.read_text() + 'x' if calls.exists() else 'x')\n"
            "if first:\n"
            "    print('HTTP 429 Too Many Requests; Retry-After: 1')\n"
            "    sys.exit(1)\n" + FIX.replace("; ", "\n") + "\n"
        )
        return make_machine(folder, engine, script_agent(script), writable)

    def scenario(machine: Machine) -> int:
        machine.start("run")
        assert machine.loopd("trigger", "calc").returncode == 0
        return 1

    (run,) = on_both(tmp_path, temporal, machines, setup, scenario)
    assert (run["outcome"], len(run["attempts"]), run["waited"]) == ("succeeded", 1, True)
    assert all(machine.runs()[0]["waited"] >= 60 for machine in machines)


def test_a_cancelled_running_run_and_a_cancelled_queued_one_are_recorded_alike(
    tmp_path: Path, temporal: Any, machines: list
) -> None:
    import signal

    from tests.helpers import events, processes_with, talk, unique_token, wait_for

    def setup(folder: Path, engine: str) -> Machine:
        folder.mkdir(parents=True, exist_ok=True)
        talked, writable = talk(folder)
        # The first run's agent waits until it is cancelled.
        script = (
            f"# parity-{folder.name}-{unique_token('cancel', tmp_path)}\n"
            "import pathlib, time\n"
            f"pathlib.Path({str(talked / 'started')!r}).write_text('yes')\n"
            "time.sleep(600)\n"
        )
        return make_machine(folder, engine, script_agent(script), writable)

    def scenario(machine: Machine) -> int:
        machine.start("run")
        assert machine.loopd("trigger", "calc", "--reason", "first").returncode == 0
        wait_for((machine.root.parent / "talk" / "started").exists, timeout=60)
        second = machine.loopd("trigger", "calc", "--reason", "second")
        assert second.returncode == 0, second.stdout + second.stderr
        queued = second.stdout.splitlines()[0]
        assert machine.loopd("cancel", queued).returncode == 0
        (running,) = wait_for(lambda: [r for r in machine.runs() if r.get("phase") == "running"])
        assert machine.loopd("cancel", running["id"]).returncode == 0
        # Who asked, on both engines: the command line's events name no one.
        asked = [e for e in events(machine.home) if e["type"] == "cancel_requested"]
        assert [(e["run"], e.get("by")) for e in asked] == [(queued, None), (running["id"], None)]
        return 2

    # A known difference: the local engine records the cancelled agent's exit code (143, its
    # SIGTERM); on Temporal the cancelled attempt activity returns no output, so none.
    known = frozenset({"[0].attempts[0].exit_code"})
    try:
        first, second = on_both(tmp_path, temporal, machines, setup, scenario, known)
    finally:
        for pid in processes_with(unique_token("cancel", tmp_path)):
            os.kill(pid, signal.SIGKILL)
    assert (first["outcome"], second["outcome"]) == ("cancelled", "cancelled")
    assert second["attempts"] == [] and second["reason"] == "cancelled while queued"


def test_a_refused_login_holds_the_profile_alike_until_check_lifts_it(
    tmp_path: Path, temporal: Any, machines: list
) -> None:
    import json

    from tests.helpers import talk, wait_for

    def setup(folder: Path, engine: str) -> Machine:
        folder.mkdir(parents=True, exist_ok=True)
        talked, writable = talk(folder)
        # Refused while the flag is there: a 401 on stderr before any output, as a CLI with
        # an expired key; `loopd check`'s try has no calc.py and only answers.
        script = (
            "import pathlib, sys\n"
            f"if pathlib.Path({str(talked / 'refuse')!r}).exists():\n"
            "    sys.stderr.write('Error: 401 Unauthorized: invalid x-api-key\\n')\n"
            "    sys.exit(1)\n"
            "if pathlib.Path('calc.py').exists():\n"
            "    " + FIX.replace("; ", "\n    ") + "\n"
            "print('OK')\n"
        )
        (talked / "refuse").write_text("")
        return make_machine(folder, engine, script_agent(script), writable)

    def held(machine: Machine) -> str:
        status = json.loads(machine.loopd("status", "--json").stdout)
        return status["loops"]["calc"].get("waiting_for", "")

    def scenario(machine: Machine) -> int:
        machine.start("run")
        assert machine.loopd("trigger", "calc", "--wait").returncode != 0
        # Each look is a `loopd status` process: a second apart, not back to back.
        wait_for(lambda: "refused the login" in held(machine), 30, 1.0, what="the hold in status")
        assert machine.loopd("trigger", "calc").returncode == 0
        (talk(machine.root.parent)[0] / "refuse").unlink()
        check = machine.loopd("check")
        assert "its login works again" in check.stdout, check.stdout
        return 2

    first, second = on_both(tmp_path, temporal, machines, setup, scenario)
    assert (first["outcome"], first["cause"]) == ("escalated", "agent-login")
    assert first["attempts"][0]["nudges"] == 0
    assert second["outcome"] == "succeeded"
