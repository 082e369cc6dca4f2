"""A pid loopd recorded (an agent's group, a landing push) is acted on after a restart only
while its start time and boot id match: a reused pid names someone else's process."""

from __future__ import annotations

import subprocess
from pathlib import Path

from daemon.landing.land import _reap_push
from daemon.processes import proc_info, process_mark, same_process
from daemon.runparts.journal import RunJournal
from daemon.runs.finish import kill_run_leftovers
from tests.helpers import unique_token, wait_for
from tests.test_landing import land_case


def setsid_sleep(token: str) -> subprocess.Popen[bytes]:
    """A process in a session and group of its own, as a push or an agent runs."""
    # Not a group leader when it starts: setsid makes its own session without forking.
    return subprocess.Popen(["setsid", "sh", "-c", f"exec sleep 300 # {token}", token])


def leader(proc: subprocess.Popen[bytes]) -> int:
    """The pid heading its own group, once setsid made it so."""

    def led() -> bool:
        info = proc_info(proc.pid)
        return info is not None and info.pgid == proc.pid

    wait_for(led, what="the process to lead its own group")
    return proc.pid


def reused(pid: int) -> str:
    """What the record of a pid now reused holds: another start time for the same pid."""
    boot, start = process_mark(pid).rsplit("/", 1)
    return f"{boot}/{int(start) - 1}"


def gone(proc: subprocess.Popen[bytes]) -> bool:
    return proc.poll() is not None


def test_a_reused_push_pid_is_left_alone_and_the_real_push_ended(tmp_path: Path) -> None:
    token = unique_token("pidmark", tmp_path)
    case = land_case(tmp_path, land="push")
    run = case.new_run()
    journal = RunJournal(case.services, run)
    other, push = setsid_sleep(token + "-other"), setsid_sleep(token + "-push")
    try:
        # A kill -9 during the push, then a reboot: the recorded pid is now someone else's.
        pid = leader(other)
        run.push_pid, run.pid_marks = pid, {str(pid): reused(pid)}
        assert not same_process(pid, run.pid_marks[str(pid)])
        _reap_push(journal)
        assert not gone(other), "an unrelated process was killed for a reused push_pid"
        assert run.push_pid == 0 and run.pid_marks == {}
        [event] = [e for e in case.store.events.read() if e["type"] == "push_reaped"]
        assert event["pid"] == pid and event["left"] == "not the push loopd started"

        # The push itself, its start recorded as loopd records it: ended.
        pid = leader(push)
        run.push_pid, run.pid_marks = pid, {str(pid): process_mark(pid)}
        _reap_push(journal)
        wait_for(lambda: gone(push), what="the recorded push to be ended")
        assert not gone(other)
        assert run.push_pid == 0
    finally:
        for proc in (other, push):
            proc.kill()
            proc.wait()


def test_a_reused_agent_group_is_left_alone_and_the_real_one_ended(tmp_path: Path) -> None:
    token = unique_token("pidmark-agent", tmp_path)
    case = land_case(tmp_path)
    run = case.new_run()
    other, agent = setsid_sleep(token + "-other"), setsid_sleep(token + "-agent")
    try:
        theirs, ours = leader(other), leader(agent)
        run.agent_pids = [theirs, ours]
        run.pid_marks = {str(theirs): reused(theirs), str(ours): process_mark(ours)}
        kill_run_leftovers(case.services, run, grace=1.0)
        wait_for(lambda: gone(agent), what="the agent's recorded group to be ended")
        assert not gone(other), "an unrelated process was killed for a reused agent pid"
        # A record written before start times were kept names no process loopd may signal.
        run.agent_pids, run.pid_marks = [theirs], {}
        kill_run_leftovers(case.services, run, grace=1.0)
        assert not gone(other)
    finally:
        for proc in (other, agent):
            proc.kill()
            proc.wait()
