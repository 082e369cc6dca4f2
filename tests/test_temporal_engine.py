"""The Temporal engine with real parts: a dev server, a home and two workers standing in for
three machines (each its own HOME, home and copy of the repository), real git, real agents."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from daemon.state.stored import is_stored
from tests.helpers import (
    git,
    processes_with,
    stored_text,
    talk,
    transcript_text,
    unique_token,
    wait_for,
)
from tests.machines import BUGGY, TASK, Cluster, command_agent, make_cluster

FIX = "p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
LOOP = {
    "task": TASK,
    "agent": "a",
    "done_when": ["python3 check.py"],
    "attempt_timeout": "120s",
    "stall_after": "60s",
    "max_nudges": 0,
    "max_attempts": 1,
    "runs_on": "gpu",
    "critic": "off",
}


def finished(machine: Any, count: int) -> list[dict[str, Any]]:
    found = machine.runs()
    return found if len(found) >= count and all(r.get("outcome") for r in found) else []


def which_worker(cluster: Cluster, cwd: str) -> int:
    """The index of the worker whose worktrees hold `cwd`."""
    for i, worker in enumerate(cluster.workers):
        if cwd.startswith(str(worker.root)):
            return i
    raise AssertionError(f"{cwd} is in no worker's folder")


def test_kill_9_of_the_worker_mid_attempt_retries_the_run_on_the_other_and_reaps_leftovers(
    tmp_path: Path, temporal: Any
) -> None:
    server, namespace = temporal
    shared, sandbox = talk(tmp_path)
    marker = shared / "first-attempt.json"
    # In the command lines of the agent and its grandchild: the sandbox gives them pids of
    # their own, so the test finds them by it.
    token = unique_token("kill9", tmp_path)
    # The first attempt leaves a grandchild in a session of its own and hangs; a later one fixes.
    script = (
        f"# {token}\n"
        "import json, os, pathlib, subprocess, sys, time\n"
        f"marker = pathlib.Path({str(marker)!r})\n"
        "if not marker.exists():\n"
        "    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)',"
        f" {token!r}], start_new_session=True)\n"
        "    tmp = marker.with_suffix('.tmp')\n"
        "    tmp.write_text(json.dumps([os.getcwd()]))\n"
        "    tmp.rename(marker)\n"
        "    time.sleep(600)\n" + FIX
    )
    cluster = make_cluster(
        tmp_path,
        server.address,
        namespace,
        BUGGY,
        command_agent("a", "import pathlib\n" + script),
        LOOP,
        config=sandbox,
    )
    try:
        cluster.home.start("run")
        for worker in cluster.workers:
            worker.start("worker", "--queue", "gpu")
        assert cluster.home.loopd("trigger", "calc").returncode == 0
        text = wait_for(lambda: marker.exists() and marker.read_text(), timeout=60)
        (cwd,) = json.loads(text)
        assert len(processes_with(token)) >= 2
        dead = which_worker(cluster, cwd)
        other = cluster.workers[1 - dead]
        cluster.workers[dead].kill9()
        first, retry = wait_for(lambda: finished(cluster.home, 2), timeout=90, what="both runs")[:2]
        assert first["outcome"] == "interrupted" and first["cause"] == "interrupted"
        assert retry["trigger"]["kind"] == "retry" and retry["trigger"]["retry_of"] == first["id"]
        assert retry["outcome"] == "succeeded", retry
        # The retry ran on the other machine: its transcript is in that worker's state only.
        transcript = Path("state/runs") / retry["id"] / "attempt-1" / "transcript.jsonl"
        assert is_stored(other.home / transcript)  # compressed as the attempt ended
        assert not is_stored(cluster.workers[dead].home / transcript)
        assert not is_stored(cluster.home.home / transcript)
        # The person's repository has the retry's branch, with the fix.
        branch = retry["branch"]
        assert "a + b" in git(cluster.home.repo, "show", f"{branch}:calc.py")
        # Back on the dead machine, the worker kills what its attempt left.
        cluster.workers[dead].start("worker", "--queue", "gpu")
        wait_for(
            lambda: not processes_with(token),
            timeout=30,
            what="the dead worker's agent processes to be killed",
        )
        reaped = cluster.workers[dead].events("attempt_reaped")
        assert [e["run"] for e in reaped] == [first["id"]]
        assert sum(r["trigger"]["kind"] == "retry" for r in cluster.home.runs()) == 1
    finally:
        cluster.stop()
        for pid in processes_with(token):
            os.kill(pid, signal.SIGKILL)


HANG = (
    "# {token}\n"
    "import json, os, pathlib, time\n"
    "marker = pathlib.Path({marker!r})\n"
    "tmp = marker.with_suffix('.tmp')\n"
    "seen = [os.getcwd(), os.path.isdir('.git'), os.path.exists({hidden!r})]\n"
    "tmp.write_text(json.dumps(seen))\n"
    "tmp.rename(marker)\n"
    "print('working', flush=True)\n"
    "time.sleep(600)\n"
)


def test_a_cancel_from_another_machine_stops_the_agent_on_its_worker(
    tmp_path: Path, temporal: Any
) -> None:
    server, namespace = temporal
    shared, sandbox = talk(tmp_path)
    marker = shared / "agent.json"
    token = unique_token("hang", tmp_path)  # the sandbox gives the agent a pid of its own
    hidden = str(tmp_path / "worker-1" / "loopd-home" / "loopd.toml")  # never visible
    agents = command_agent("a", HANG.format(marker=str(marker), token=token, hidden=hidden))
    cluster = make_cluster(
        tmp_path, server.address, namespace, BUGGY, agents, LOOP, workers=1, config=sandbox
    )
    try:
        cluster.home.start("run")
        worker = cluster.workers[0]
        worker.start("worker", "--queue", "gpu")
        assert cluster.home.loopd("trigger", "calc").returncode == 0
        cwd, own_clone, home_seen = json.loads(
            wait_for(lambda: marker.exists() and marker.read_text())
        )
        assert processes_with(token)
        # The worker made the run's tree as the local engine does (a clone of its own, in
        # the worker's folders) and runs the agent sandboxed: the worker's home is hidden.
        assert cwd.startswith(str(worker.root)) and own_clone and not home_seen
        # The worker's machine lists every machine's runs and cancels the home's run.
        listed = json.loads(worker.loopd("runs", "--json").stdout)
        assert [r["phase"] for r in listed] == ["running"]
        run_id = listed[0]["id"]
        status = json.loads(worker.loopd("status", "--json").stdout)
        assert status["loops"]["calc"]["run"] == run_id
        assert status["loops"]["calc"]["phase"] == "running"
        assert status["loops"]["calc"]["worker"].startswith("worker:")
        proc = worker.loopd("cancel", run_id)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == f"{run_id}: cancelled"
        wait_for(lambda: not processes_with(token), timeout=30, what="the agent to be stopped")
        (run,) = wait_for(lambda: finished(cluster.home, 1))
        assert run["outcome"] == "cancelled" and run["cause"] == "cancelled"
        assert run["attempts"][0]["interrupted"] is True
        shown = json.loads(worker.loopd("show", run_id, "--json").stdout)
        assert shown["outcome"] == "cancelled" and shown["id"] == run_id
        transcript = transcript_text(worker.home / "state" / "runs" / run_id / "attempt-1")
        assert "working" in transcript
        # `loopd logs` on the worker's machine shows the attempt it ran.
        logs = worker.loopd("logs", run_id)
        assert logs.returncode == 0 and "working" in logs.stdout, logs.stdout + logs.stderr
        again = worker.loopd("cancel", run_id)
        assert again.returncode == 1 and "already ended: cancelled" in again.stdout
        assert worker.loopd("cancel", "20990101T000000Z-calc-0000").returncode == 2
    finally:
        cluster.stop()


def test_the_server_restarted_mid_run_does_not_lose_the_run(
    tmp_path: Path, temporal_of_its_own: Any
) -> None:
    server, namespace = temporal_of_its_own  # a server it kills: not the one the others share
    shared, sandbox = talk(tmp_path)
    gate, started = shared / "gate", shared / "started"
    script = (
        "import pathlib, time\n"
        f"pathlib.Path({str(started)!r}).write_text('x')\n"
        f"while not pathlib.Path({str(gate)!r}).exists():\n"
        "    time.sleep(0.1)\n" + FIX
    )
    cluster = make_cluster(
        tmp_path,
        server.address,
        namespace,
        BUGGY,
        command_agent("a", "import pathlib\n" + script),
        LOOP,
        workers=1,
        heartbeat="20s",
        config=sandbox,
    )
    try:
        cluster.home.start("run")
        cluster.workers[0].start("worker", "--queue", "gpu")
        assert cluster.home.loopd("trigger", "calc").returncode == 0
        wait_for(started.exists, timeout=60, what="the agent to start")
        server.restart(signal.SIGKILL)  # the server dies as in a crash, and comes back
        gate.write_text("go")
        (run,) = wait_for(lambda: finished(cluster.home, 1), timeout=90, what="the run")
        assert run["outcome"] == "succeeded", run
        assert len(run["attempts"]) == 1 and not run["attempts"][0].get("interrupted")
        assert [r["id"] for r in cluster.home.runs()] == [run["id"]]
    finally:
        cluster.stop()


def test_a_burst_of_1000_pushes_on_two_machines_is_one_running_and_one_pending_run(
    tmp_path: Path, temporal: Any
) -> None:
    from datetime import UTC, datetime

    from daemon.state.records import Trigger
    from daemon.state.store import StateStore

    server, namespace = temporal
    shared, sandbox = talk(tmp_path)
    gate, started = shared / "gate", shared / "started"
    script = (
        "import pathlib, time\n"
        f"pathlib.Path({str(started)!r}).write_text('x')\n"
        f"while not pathlib.Path({str(gate)!r}).exists():\n"
        "    time.sleep(0.1)\n"
    )
    loop = {**LOOP, "on_push": ["main"], "done_when": []}
    cluster = make_cluster(
        tmp_path,
        server.address,
        namespace,
        BUGGY,
        command_agent("a", script),
        loop,
        workers=1,
        config=sandbox,
    )
    try:
        cluster.home.start("run")
        worker = cluster.workers[0]
        worker.start("worker", "--queue", "gpu")
        assert cluster.home.loopd("trigger", "calc", "--reason", "first").returncode == 0
        wait_for(started.exists, timeout=60, what="the first run's agent")
        # The hooks of both machines write a push each into their home's inbox.
        for machine, count in ((cluster.home, 500), (worker, 500)):
            store = StateStore(machine.home / "state")
            for i in range(count):
                store.put_trigger(
                    Trigger(
                        loop="calc",
                        kind="push",
                        reason=f"push {machine.name} {i}",
                        ref="refs/heads/main",
                        old="0" * 40,
                        new=f"{i:040x}",
                        ts=datetime.now(UTC),
                    )
                )
        wait_for(
            lambda: len([e for e in cluster.home.events("trigger") if e["kind"] == "push"]) == 1000,
            timeout=120,
            what="all 1,000 pushes taken",
        )
        status = json.loads(worker.loopd("status", "--json").stdout)["loops"]["calc"]
        assert status["phase"] == "running" and status["pending"] == 1
        assert not list((cluster.home.home / "state" / "inbox").glob("*.json"))
        assert not list((worker.home / "state" / "inbox").glob("*.json"))
        gate.write_text("go")
        first, second = wait_for(lambda: finished(cluster.home, 2), timeout=90, what="two runs")
        assert first["trigger"]["reason"] == "first" and first["outcome"] == "succeeded"
        assert second["trigger"]["kind"] == "push" and second["outcome"] == "succeeded"
        assert second["trigger"]["merged_count"] == 999
        assert len(cluster.home.runs()) == 2
        assert len(cluster.home.events("trigger_merged")) == 999
    finally:
        cluster.stop()


def test_a_rule_learned_from_an_attempt_on_one_worker_guides_a_run_on_the_other(
    tmp_path: Path, temporal: Any, model_server: Any
) -> None:
    import sys

    from tests.test_learning_e2e import AGENT, AGREES, LEARNED, REPO, RULE_MARK, default_reply

    server, namespace = temporal
    model_server.script(default_reply)
    model_server.add({"json": LEARNED}, name="postmortem_rule")
    model_server.add({"json": AGREES}, name="rule_verification")
    script = tmp_path / "agent.py"
    script.write_text(AGENT.replace("RULE_MARK", repr(RULE_MARK)))
    shared, sandbox = talk(tmp_path)
    marker = shared / "agent-started.txt"
    agents = (
        f'[agents.a]\nadapter = "command"\n'
        f"command = {json.dumps([sys.executable, str(script), str(marker)])}\n"
    )
    verifier = (
        f'[verifier]\nbase_url = "{model_server.base_url}"\nmodel = "critic-model"\n'
        'timeout = "20s"\njudge_timeout = "20s"\npending_limit = "30s"\n'
    )
    loop = {**LOOP, "critic": "on", "task": TASK}
    cluster = make_cluster(
        tmp_path,
        server.address,
        namespace,
        REPO,
        agents,
        loop,
        workers=2,
        config=verifier + sandbox,
    )
    home, first, second = cluster.home, cluster.workers[0], cluster.workers[1]
    try:
        home.start("run")
        first.start("worker", "--queue", "gpu")
        proc = home.loopd("trigger", "calc", "--wait")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        run_1 = proc.stdout.splitlines()[0]
        assert (first.home / "state/runs" / run_1 / "attempt-1/transcript.jsonl.gz").is_file()
        # The rule was filed by the home (one writer), from the first worker's evidence.
        (rule_path,) = (home.home / "rules" / "trial").glob("*.md")
        for machine in (first, second):
            assert not list((machine.home / "rules").rglob("*.md"))
        front = tomllib_front(rule_path)
        assert front["verified_by"] == ["grounding", "duplicates", "model:critic-model"]
        cited = {(e["path"], e["quote"]) for e in front["evidence"]}
        assert (f"runs/{run_1}/attempt-1/transcript.jsonl", "patched legacy/calc.py") in cited
        for entry in front["evidence"]:  # the home holds the cited lines at their numbers
            lines = stored_text(home.home / "state" / entry["path"]).split("\n")
            assert entry["quote"] in lines[entry["line"] - 1]
        # The worker sent the rule's evidence lines, never the whole transcript.
        name = "attempt-1/transcript.jsonl"
        whole = stored_text(first.home / "state/runs" / run_1 / name).split("\n")
        lines = stored_text(home.home / "state/runs" / run_1 / name).split("\n")
        assert len(lines) == len(whole)  # at their line numbers; the others left blank
        assert all(line in ("", whole[i]) for i, line in enumerate(lines))
        assert any("patched legacy/calc.py" in line for line in lines)
        first.stop()
        second.start("worker", "--queue", "gpu")
        proc = home.loopd("trigger", "calc", "--wait")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        run_2 = proc.stdout.splitlines()[0]
        prompt = (second.home / "state/runs" / run_2 / "attempt-1/prompt.md").read_text()
        assert "# Rules from earlier runs" in prompt and LEARNED["rule"] in prompt
        assert prompt == (home.home / "state/runs" / run_2 / "attempt-1/prompt.md").read_text()
        assert [r["outcome"] for r in home.runs()] == ["escalated", "succeeded"]
        front = tomllib_front(rule_path)
        assert (front["fired"], front["helped"]) == (1, 1)
    finally:
        cluster.stop()


def tomllib_front(path: Path) -> dict[str, Any]:
    import tomllib

    return tomllib.loads(path.read_text().split("+++")[1])


def test_a_schedule_fires_and_a_fire_missed_while_the_workers_were_down_is_caught_up(
    tmp_path: Path, temporal: Any
) -> None:
    from datetime import UTC, datetime, timedelta
    from zoneinfo import ZoneInfo

    from daemon.scheduling.cron import Schedule
    from tests.temporal_server import client_call

    server, namespace = temporal
    zone = ZoneInfo("Europe/Paris")
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    recent, old = now - timedelta(minutes=3), now - timedelta(minutes=20)
    crons = [f"{t.astimezone(zone).minute} {t.astimezone(zone).hour} * * *" for t in (recent, old)]
    loop = {**LOOP, "schedule": crons, "timezone": "Europe/Paris", "catch_up": "10m"}
    agents = command_agent("a", "import pathlib\n" + FIX)
    cluster = make_cluster(tmp_path, server.address, namespace, BUGGY, agents, loop, workers=1)
    home, worker = cluster.home, cluster.workers[0]
    try:
        home.start("run")
        worker.start("worker", "--queue", "gpu")
        # The next fire comes from the server, and is the loop's own cron's next fire.
        status = json.loads(worker.loopd("status", "--json").stdout)["loops"]["calc"]
        expected = Schedule(crons, "Europe/Paris").next_fire(datetime.now(UTC))
        assert datetime.fromisoformat(status["next_fire"]) == expected
        # The loop's schedule fires: its action signals the controller, which starts the run.
        client_call(
            server.address, namespace, 'await client.get_schedule_handle("loopd/calc").trigger()'
        )
        (run,) = wait_for(lambda: finished(home, 1), timeout=60, what="the scheduled run")
        assert run["trigger"]["kind"] == "schedule" and run["outcome"] == "succeeded"
        assert run["trigger"]["reason"].startswith("scheduled for ")
        # Every loopd stops; meanwhile the schedule fires twice (3 and 20 minutes ago).
        assert worker.stop() == 0 and home.stop() == 0
        for at in (recent, old):
            client_call(
                server.address,
                namespace,
                f"""
                from temporalio.client import ScheduleBackfill, ScheduleOverlapPolicy
                at = datetime.fromisoformat({at.isoformat()!r})
                await client.get_schedule_handle("loopd/calc").backfill(
                    ScheduleBackfill(start_at=at - timedelta(seconds=30),
                                     end_at=at + timedelta(seconds=30),
                                     overlap=ScheduleOverlapPolicy.ALLOW_ALL))
                """,
            )
        home.start("run")
        worker.start("worker", "--queue", "gpu")
        first, caught = wait_for(lambda: finished(home, 2), timeout=60, what="the caught-up run")
        assert caught["trigger"]["kind"] == "catch-up" and caught["outcome"] == "succeeded"
        local = recent.astimezone(zone).strftime("%H:%M")
        assert (
            "catching up the fire of" in caught["trigger"]["reason"]
            and local in caught["trigger"]["reason"]
        )
        (missed,) = wait_for(lambda: home.events("schedule_missed"), what="the missed fire")
        assert datetime.fromisoformat(missed["fire"].replace("Z", "+00:00")) == old
        assert len(home.runs()) == 2
    finally:
        cluster.stop()


def test_the_homes_activities_act_only_for_runs_the_home_started(
    tmp_path: Path, temporal: Any
) -> None:
    """Anyone who reaches the engine can start a run workflow on the home's queue (with the
    inputs of a real run, read from its history); the home's activities refuse to act for it."""
    from tests.temporal_server import client_call

    server, namespace = temporal
    loop = {**LOOP, "runs_on": ""}
    agents = command_agent("a", "import pathlib\n" + FIX)
    cluster = make_cluster(tmp_path, server.address, namespace, BUGGY, agents, loop, workers=0)
    home = cluster.home
    try:
        home.start("run")
        proc = home.loopd("trigger", "calc", "--wait")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        real = proc.stdout.splitlines()[0]
        forged, stolen = "20990101T000000Z-calc-0001", "20990101T000000Z-calc-0002"
        out = client_call(
            server.address,
            namespace,
            f"""
            from temporalio.client import WorkflowFailureError
            history = await client.get_workflow_handle("loopd/calc/{real}").fetch_history()
            start = history.events[0].workflow_execution_started_event_attributes
            given = json.loads(start.input.payloads[0].data)
            fake = json.loads(json.dumps(given))
            fake["ref"]["run_id"], fake["ref"]["token"] = "{forged}", "0" * 32
            attempts = {{"{forged}": fake, "{stolen}": given}}
            result = {{}}
            for run_id, arg in attempts.items():
                handle = await client.start_workflow(
                    "RunWorkflow", arg, id=f"loopd/calc/{{run_id}}", task_queue="loopd"
                )
                try:
                    await asyncio.wait_for(handle.result(), 60)
                    result[run_id] = "completed"
                except WorkflowFailureError as exc:
                    result[run_id] = str(exc.cause)
            print(json.dumps(result))
            """,
            timeout=120,
        )
        result = json.loads(out.splitlines()[-1])
        assert set(result) == {forged, stolen}
        assert all(outcome != "completed" for outcome in result.values()), result
        # Nothing was done for them: no record, no event, no branch, no attempt.
        assert [r["id"] for r in home.runs()] == [real]
        assert not [e for e in home.events() if e.get("run") in (forged, stolen)]
        branches = git(home.repo, "branch", "--format=%(refname:short)").split()
        assert sorted(branches) == sorted(["main", f"loopd/calc/{real}"])
    finally:
        cluster.stop()


def test_a_usage_limit_parks_the_run_on_a_durable_timer_and_the_same_attempt_goes_on(
    tmp_path: Path, temporal: Any
) -> None:
    """The attempt's activity ends at the limit (no activity runs while parked), the home holds
    the profile, the workflow waits until `resume_at` (past a restart of the worker) and the
    same attempt resumes on its worker, asked the same again."""
    from daemon.state.holds import load_quota
    from daemon.state.store import StateStore
    from tests.temporal_server import client_call

    server, namespace = temporal
    shared, sandbox = talk(tmp_path)
    calls = shared / "calls"
    # A 429 with Retry-After: 1 s: the run resumes a minute past that (the reset margin).
    script = (
        "import pathlib, sys\n"
        f"calls = pathlib.Path({str(calls)!r})\n"
        "prompt = sys.stdin.read()\n"
        "first = not calls.exists()\n"
        "calls.write_text((calls.read_text() + '\\x00' if calls.exists() else '') + prompt)\n"
        "if first:\n"
        "    print('HTTP 429 Too Many Requests; Retry-After: 1')\n"
        "    sys.exit(1)\n" + FIX
    )
    cluster = make_cluster(
        tmp_path,
        server.address,
        namespace,
        BUGGY,
        command_agent("a", "import pathlib\n" + script),
        LOOP,
        workers=1,
        config=sandbox,
    )
    home, worker = cluster.home, cluster.workers[0]
    for machine in (home, worker):  # a second loop with the same agent profile
        loops = machine.home / "loops"
        (loops / "other.toml").write_text((loops / "calc.toml").read_text())
    try:
        home.start("run")
        worker.start("worker", "--queue", "gpu")
        assert home.loopd("trigger", "calc").returncode == 0
        (run,) = wait_for(
            lambda: [r for r in home.runs() if r.get("phase") == "waiting"], timeout=60
        )
        assert run["resume_at"] and run["park"]["profile"] == "a"
        (wait,) = wait_for(lambda: home.events("quota_wait"), what="the quota_wait event")
        assert wait["run"] == run["id"] and wait["worker"].startswith("worker:")
        # The home holds the profile (its queue), not the worker.
        hold = load_quota(StateStore(home.home / "state")).profiles["a"]
        assert hold.run == run["id"]
        assert "a" not in load_quota(StateStore(worker.home / "state")).profiles
        # No activity runs while parked: the workflow waits on a timer.
        out = client_call(
            server.address,
            namespace,
            f"""
            handle = client.get_workflow_handle("loopd/calc/{run["id"]}")
            d = await handle.describe()
            print(len(d.raw_description.pending_activities))
            """,
        )
        assert out.split()[-1] == "0"
        status = json.loads(home.loopd("status", "--json").stdout)["loops"]["calc"]
        assert status["phase"] == "waiting"
        # The profile's limit holds the other loop's new run until then too.
        assert home.loopd("trigger", "other", "--reason", "held").returncode == 0

        def status_file() -> dict[str, Any] | None:
            import tomllib

            path = home.home / "state" / "status.toml"
            loops = tomllib.loads(path.read_text())["loops"] if path.exists() else {}
            ready = loops.get("other", {}).get("phase") == "waiting"
            return loops if ready and loops["calc"].get("phase") == "waiting" else None

        loops = wait_for(status_file, what="status.toml showing the park and the hold")
        assert loops["calc"]["run"] == run["id"] and "usage limit" in loops["calc"]["waiting_for"]
        assert loops["calc"]["resume_at"] == run["resume_at"]
        assert loops["other"]["pending"] == 1 and "usage limit" in loops["other"]["waiting_for"]
        assert [r["id"] for r in home.runs()] == [run["id"]]
        # The worker's machine restarts meanwhile; the wait is the engine's.
        assert worker.stop() == 0
        worker.start("worker", "--queue", "gpu")
        done, other = wait_for(lambda: finished(home, 2), timeout=150, what="both runs")
        assert (done["id"], other["loop"]) == (run["id"], "other")
        assert other["outcome"] == "succeeded" and other["trigger"]["reason"] == "held"
        assert other["started"] >= hold.resume_at
        assert done["outcome"] == "succeeded", done
        assert len(done["attempts"]) == 1 and done["attempts"][0]["nudges"] == 0
        assert done["waited"] >= 60 and "park" not in done and "resume_at" not in done
        asked = calls.read_text().split("\x00")
        assert len(asked) == 3 and asked.count(asked[0]) == 2  # not a nudge: the same again
        assert len(home.events("quota_resumed")) == 1
    finally:
        cluster.stop()


def test_reload_answers_and_a_broken_loop_file_keeps_its_schedule_and_the_others(
    tmp_path: Path, temporal: Any
) -> None:
    from tests.temporal_server import client_call

    server, namespace = temporal
    loop = {**LOOP, "runs_on": "", "schedule": ["0 3 * * *"], "timezone": "UTC"}
    agents = command_agent("a", "import pathlib\n" + FIX)
    cluster = make_cluster(tmp_path, server.address, namespace, BUGGY, agents, loop, workers=0)
    home = cluster.home
    calc = home.home / "loops" / "calc.toml"
    good = calc.read_text()
    (home.home / "loops" / "other.toml").write_text(good.replace("0 3 * * *", "0 4 * * *"))

    def schedules() -> list[str]:
        out = client_call(
            server.address,
            namespace,
            """
            found = [s.id async for s in await client.list_schedules()]
            print(json.dumps(sorted(found)))
            """,
        )
        return json.loads(out.splitlines()[-1])

    try:
        home.start("run")
        both = ["loopd/calc", "loopd/other"]
        assert [s for s in schedules() if "/dst" not in s] == both
        # A broken loop file: the reload answers, the loop keeps its last good configuration
        # and its schedule; the other loops go on.
        calc.write_text(good + "max_attempts = 'many'\n")
        proc = home.loopd("reload", "--json", timeout=60)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        event = json.loads(proc.stdout)
        assert event["type"] == "reloaded" and event["stale"] == ["calc"]
        assert event["loops"] == ["calc", "other"]
        assert [s for s in schedules() if "/dst" not in s] == both

        def stale() -> bool:
            import tomllib

            path = home.home / "state" / "status.toml"
            loops = tomllib.loads(path.read_text())["loops"] if path.exists() else {}
            return bool(loops.get("calc", {}).get("stale")) and "other" in loops

        wait_for(stale, what="status.toml to show calc's file stale")
        # A new loop whose file is broken is not loaded, and takes nothing with it.
        (home.home / "loops" / "third.toml").write_text("task = \n")
        calc.write_text(good)
        proc = home.loopd("reload", "--json", timeout=60)
        event = json.loads(proc.stdout)
        assert event["not_loaded"] == ["third"] and event["stale"] == []
        assert [s for s in schedules() if "/dst" not in s] == both
        proc = home.loopd("trigger", "other", "--wait")
        assert proc.returncode == 0, proc.stdout + proc.stderr
    finally:
        cluster.stop()


def test_loopd_run_and_worker_on_temporal_make_themselves_undumpable(
    tmp_path: Path, temporal: Any
) -> None:
    """Agents run as the same user: the processes holding the engine's credentials must not
    be readable through /proc or ptrace."""
    import subprocess
    import sys
    import time

    server, namespace = temporal
    agents = command_agent("a", "print('idle')")
    cluster = make_cluster(tmp_path, server.address, namespace, BUGGY, agents, LOOP, workers=1)
    probe = (
        "import ctypes, os, sys\n"
        "real = os._exit\n"
        "def leave(code):\n"
        "    print('dumpable', ctypes.CDLL(None).prctl(3, 0, 0, 0, 0), flush=True)\n"
        "    real(code)\n"
        "os._exit = leave\n"
        "from daemon.cli.main import main\n"
        "leave(main(sys.argv[1:]))\n"
    )
    try:
        for machine, command in ((cluster.home, ["run"]), (cluster.workers[0], ["worker"])):
            proc = subprocess.Popen(
                [sys.executable, "-c", probe, "--home", str(machine.home), *command],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=machine.env,
                cwd=Path(__file__).resolve().parent.parent,
            )
            lines = []
            deadline = time.monotonic() + 60
            assert proc.stdout is not None
            while time.monotonic() < deadline:
                line = proc.stdout.readline()
                lines.append(line)
                if " running for " in line or " worker for " in line or not line:
                    break
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=60)
            assert out.splitlines()[-1] == "dumpable 0", "".join(lines) + out
    finally:
        cluster.stop()


def test_a_spent_daily_budget_holds_the_loops_new_runs_on_temporal(
    tmp_path: Path, temporal: Any
) -> None:
    import tomllib
    from datetime import UTC, datetime, timedelta

    from daemon.state.store import StateStore
    from tests.test_budget import spent

    server, namespace = temporal
    loop = {**LOOP, "runs_on": "", "daily_tokens": 100, "timezone": "UTC"}
    agents = command_agent("a", "import pathlib\n" + FIX)
    cluster = make_cluster(tmp_path, server.address, namespace, BUGGY, agents, loop, workers=0)
    home = cluster.home
    # Earlier today the loop spent 150 tokens (as a finished run leaves its record).
    now = datetime.now(UTC)
    spent(
        StateStore(home.home / "state"),
        "calc",
        150,
        max(now - timedelta(minutes=1), now.replace(hour=0, minute=0, second=1)),
    )
    try:
        home.start("run")
        proc = home.loopd("trigger", "calc")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        run_id = proc.stdout.splitlines()[0]

        def held() -> dict[str, Any] | None:
            path = home.home / "state" / "status.toml"
            entry = tomllib.loads(path.read_text())["loops"]["calc"] if path.exists() else {}
            return entry if entry.get("phase") == "waiting" else None

        entry = wait_for(held, what="status.toml to show the budget's hold")
        assert entry["pending"] == 1 and "daily_tokens" in entry["waiting_for"]
        assert entry["resume_at"] == (now + timedelta(days=1)).replace(
            hour=0, minute=0, second=0, microsecond=0
        )
        (event,) = wait_for(lambda: home.events("budget_exhausted"), what="the budget's event")
        assert event["loop"] == "calc" and event["tokens"] == 150 and event["limit"] == 100
        status = json.loads(home.loopd("status", "--json").stdout)["loops"]["calc"]
        assert status["phase"] == "waiting" and "daily_tokens" in status["waiting_for"]
        # The held run has not started: no record of it.
        assert run_id not in [r["id"] for r in home.runs()]
    finally:
        cluster.stop()


def test_setup_runs_on_the_worker_in_each_tree_it_makes_and_a_failure_there_is_escalated(
    tmp_path: Path, temporal: Any
) -> None:
    from tests.machines import loop_toml

    server, namespace = temporal
    shared, sandbox = talk(tmp_path)
    makes = "echo made by setup > generated.txt"
    loop = {
        **LOOP,
        "setup": ["echo preparing", makes],
        "done_when": ["python3 check.py", "grep -q 'made by setup' generated.txt"],
    }
    agents = command_agent("a", "import pathlib\n" + FIX)
    cluster = make_cluster(
        tmp_path, server.address, namespace, BUGGY, agents, loop, workers=1, config=sandbox
    )
    worker = cluster.workers[0]
    once = shared / "setup-ran"
    # `broken` fails its setup at once; `later` passes it in the first tree (the done check's)
    # and fails it in the attempt's.
    broken = {**LOOP, "setup": ["echo preparing", "echo no such package >&2; exit 3"]}
    later = {
        **LOOP,
        "setup": [f"test ! -e {once} || {{ echo no index in the second tree >&2; exit 4; }}"
                  f"; touch {once}"],
    }  # fmt: skip
    for machine in (cluster.home, worker):
        for name, settings in (("broken", broken), ("later", later)):
            (machine.home / "loops" / f"{name}.toml").write_text(
                loop_toml(machine.repo, **settings)
            )
    try:
        cluster.home.start("run")
        worker.start("worker", "--queue", "gpu")
        proc = cluster.home.loopd("trigger", "calc", "--wait")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        run_id = proc.stdout.splitlines()[0]
        run = next(r for r in cluster.home.runs() if r["id"] == run_id)
        assert (run["outcome"], run["cause"]) == ("succeeded", "passed"), run["reason"]
        # Setup ran on the worker: for the done check's tree, then for the attempt's (whose
        # checks needed its file); its log is the worker's, its tail the home's. (It also ran
        # in each clean check tree, logged apart in check-setup.log.)
        ran = [e for e in worker.events("setup_finished") if e["run"] == run_id]
        assert [e["passed"] for e in ran if e["log"] == "setup.log"] == [True, True]
        assert {e["log"] for e in ran} == {"setup.log", "check-setup.log"}
        (noted,) = [e for e in cluster.home.events("setup_finished") if e["run"] == run_id]
        assert noted["worker"].startswith("worker:")
        for machine in (worker, cluster.home):
            log = (machine.home / "state/runs" / run_id / "setup.log").read_text()
            assert "$ " + makes in log, machine.name
        (check,) = [e for e in cluster.home.events("done_check") if e["run"] == run_id]
        assert check["passed"] is False and check["worker"] == noted["worker"]
        assert (worker.home / "state/runs" / run_id / "done-check.log").is_file()
        files = git(cluster.home.repo, "ls-tree", "-r", "--name-only", run["branch"]).splitlines()
        assert "generated.txt" not in files and "calc.py" in files

        for name, code in (("broken", "exit 3"), ("later", "exit 4")):
            proc = cluster.home.loopd("trigger", name, "--wait")
            assert proc.returncode == 1, proc.stdout + proc.stderr
            failed = proc.stdout.splitlines()[0]
            run = next(r for r in cluster.home.runs() if r["id"] == failed)
            assert (run["outcome"], run["cause"]) == ("error", "setup-failed"), run
            assert run["reason"].startswith("setup failed on worker worker:"), run["reason"]
            assert code in run["reason"]
            said = "no such package" if name == "broken" else "no index in the second tree"
            assert said in (worker.home / "state/runs" / failed / "setup.log").read_text()
            escalation = (cluster.home.home / "state/escalations" / f"{failed}.md").read_text()
            assert "## Setup (tail of setup.log)" in escalation and said in escalation
    finally:
        cluster.stop()


def test_a_commit_through_the_hooks_is_a_push_run_on_temporal(
    tmp_path: Path, temporal: Any
) -> None:
    """The hooks leave a record in the home's inbox; the Temporal engine's forwarder makes the
    push trigger of it, as the local daemon's intake does."""
    server, namespace = temporal
    shared, sandbox = talk(tmp_path)
    loop = {**LOOP, "on_push": ["main"], "done_when": []}
    script = f"import pathlib\npathlib.Path({str(shared / 'ran')!r}).write_text('x')\n"
    cluster = make_cluster(
        tmp_path,
        server.address,
        namespace,
        BUGGY,
        command_agent("a", script),
        loop,
        workers=1,
        config=sandbox,
    )
    try:
        installed = cluster.home.loopd("hooks", "install")
        assert installed.returncode == 0, installed.stderr
        cluster.home.start("run")
        cluster.workers[0].start("worker", "--queue", "gpu")
        git(cluster.home.repo, "commit", "-q", "--allow-empty", "-m", "through the hooks")
        new = git(cluster.home.repo, "rev-parse", "HEAD")
        (run,) = wait_for(lambda: finished(cluster.home, 1), timeout=90, what="the push run")
        assert run["trigger"]["kind"] == "push" and run["trigger"]["new"] == new
        assert not list((cluster.home.home / "state" / "inbox").glob("*.hook"))
    finally:
        cluster.stop()
