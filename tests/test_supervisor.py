"""The supervisor with real subprocesses: streams, redaction, environment, kills, stalls, caps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from daemon.agents.base import AgentAdapter, AgentEvent, Invocation, Resume
from daemon.agents.command import CommandAdapter
from daemon.agents.environment import agent_environment, without_loopd_venv
from daemon.agents.supervisor import MAX_LINE, ProcessResult, Supervisor
from daemon.agents.transcript import Transcript
from daemon.config import AgentProfile
from daemon.processes import (
    descendants,
    kill_leftovers,
    kill_tree,
    proc_info,
    reap_orphans,
    run_in_own_group,
    set_child_subreaper,
)
from tests.helpers import in_fresh_interpreter

PY = sys.executable
AWS_KEY_ID = "AKIAZ3Q7XW5T9RPLM2KD"
GITHUB = "ghp_" + "R4nd0mT0k3nV4lu3sF0rT3st1ngXyZ987654"
PEM_LINES = [
    "-----BEGIN OPENSSH PRIVATE KEY-----",
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
    "QyNTUxOQAAACDx3mFakeFakeFakeFakeFakeFakeFakeFakeFakeFakeFakeAAAAJgAAA",
    "-----END OPENSSH PRIVATE KEY-----",
]


def script(body: str) -> list[str]:
    """argv of a python3 -c agent."""
    return [PY, "-c", textwrap.dedent(body)]


def command_adapter() -> CommandAdapter:
    return CommandAdapter(AgentProfile(adapter="command", command=["agent"]))


class JsonAdapter(AgentAdapter):
    """A tiny structured adapter: each stdout line is one AgentEvent as JSON."""

    name = "json-test"
    structured_stream = tool_calls = usage = session_resume = True

    def invocation(self, prompt: str, resume: Resume | None = None) -> Invocation:
        raise NotImplementedError

    def parse_line(self, line: str) -> list[AgentEvent]:
        data = self.loads(line)
        if data is None:
            return [AgentEvent(type="raw", text=line)]
        return [AgentEvent(**data)]


def json_adapter() -> JsonAdapter:
    return JsonAdapter(AgentProfile(adapter="command", command=["agent"]))


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def alive(pid: int) -> bool:
    info = proc_info(pid)
    return info is not None and info.state not in ("Z", "X")


def wait_until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    """Poll `condition`; fail when it is still false after `seconds` (a hang guard only)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition still false"
        time.sleep(0.02)


def our_zombies() -> list[int]:
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            info = proc_info(int(name))
            if info is not None and info.ppid == me and info.state == "Z":
                found.append(info.pid)
    return found


@pytest.fixture
def work(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    return tree


@pytest.fixture
def transcript(tmp_path: Path):
    t = Transcript(tmp_path / "attempt-1" / "transcript.jsonl", cap_bytes=1 << 20)
    yield t
    t.close()


def supervise(
    adapter: AgentAdapter,
    transcript: Transcript,
    cwd: Path,
    argv: list[str],
    *,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 20.0,
    stall_after: float = 20.0,
    kill_grace: float = 1.0,
) -> ProcessResult:
    sup = Supervisor(
        adapter,
        transcript,
        cwd,
        env if env is not None else {"PATH": os.environ["PATH"]},
        kill_grace=kill_grace,
    )
    return sup.run(Invocation(argv=argv, stdin=stdin), timeout=timeout, stall_after=stall_after)


def test_output_goes_to_the_transcript_redacted(work: Path, transcript: Transcript) -> None:
    pem = "\n".join(PEM_LINES)
    result = supervise(
        command_adapter(),
        transcript,
        work,
        script(f"""
            import sys
            print("starting with {AWS_KEY_ID}")
            print("token {GITHUB}", file=sys.stderr)
            print({pem!r})
            print("done: all good")
        """),
    )
    transcript.close()
    text = transcript.path.read_text()
    assert result.exit_code == 0 and not result.killed
    assert result.final_text == "done: all good"
    for secret in (AWS_KEY_ID, GITHUB, *PEM_LINES[1:3]):
        assert secret not in text
    lines = records(transcript.path)
    assert [r["type"] for r in lines if r["stream"] == "loopd"] == ["process", "process"]
    stderr = [r for r in lines if r["stream"] == "stderr"]
    assert stderr == [
        {
            "ts": stderr[0]["ts"],
            "stream": "stderr",
            "type": "raw",
            "text": "token [REDACTED:github-token]",
        }
    ]
    stdout_texts = [r["text"] for r in lines if r["stream"] == "stdout"]
    assert stdout_texts[0] == "starting with [REDACTED:aws-access-key]"
    assert stdout_texts[1:5] == ["[REDACTED:private-key]"] * 4
    assert all("raw" not in r for r in lines)  # plain text lines carry no separate raw
    assert stat_mode(transcript.path) == 0o600
    assert stdout_texts[-1] == "done: all good"


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_stdin_gets_the_prompt_then_eof(work: Path, transcript: Transcript) -> None:
    prompt = "# Task\n" + "fix it " * 20000  # larger than a pipe buffer
    result = supervise(
        command_adapter(),
        transcript,
        work,
        script("""
            import sys
            data = sys.stdin.read()
            print(len(data), data[:6])
        """),
        stdin=prompt.encode(),
    )
    assert result.exit_code == 0
    assert result.final_text == f"{len(prompt)} # Task"


def test_stdin_is_dev_null_without_a_prompt(work: Path, transcript: Transcript) -> None:
    result = supervise(
        command_adapter(),
        transcript,
        work,
        script("""
            import os, sys
            print(os.readlink("/proc/self/fd/0"), repr(sys.stdin.read()))
        """),
    )
    assert result.final_text == "/dev/null ''"


def test_environment_is_an_allowlist(
    work: Path, transcript: Transcript, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOPD_X", "daemon-internal")
    monkeypatch.setenv("NOTIFY_SOCKET", "/run/systemd/notify")
    monkeypatch.setenv("VERIFIER_KEY", "verifier-secret")
    monkeypatch.setenv("SOME_OTHER_TOKEN", "users-token")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    home = tmp_path / "agent-home"
    env = agent_environment(
        {"AGENT_MODE": "fast", "LOOPD_SNEAKY": "x"},
        {"OPENAI_API_KEY": "agent-key"},
        home,
        withhold=["VERIFIER_KEY"],
    )
    result = supervise(
        command_adapter(),
        transcript,
        work,
        script("""
            import json, os
            print(json.dumps(dict(os.environ), sort_keys=True))
        """),
        env=env,
    )
    child = json.loads(result.final_text)
    for name in ("LOOPD_X", "LOOPD_SNEAKY", "NOTIFY_SOCKET", "VERIFIER_KEY", "SOME_OTHER_TOKEN"):
        assert name not in child
    assert child["HOME"] == str(home)
    # The PATH the agent gets: the daemon's, without loopd's own venv (its python3 would
    # take the place of the person's).
    assert child["PATH"] == without_loopd_venv(os.environ["PATH"])
    assert child["LC_ALL"] == "C.UTF-8"
    assert child["AGENT_MODE"] == "fast"
    assert child["OPENAI_API_KEY"] == "agent-key"


def test_supervisor_drops_loopd_variables_even_when_given(
    work: Path, transcript: Transcript
) -> None:
    result = supervise(
        command_adapter(),
        transcript,
        work,
        script(
            "import os; print(sorted(k for k in os.environ if k.startswith('LOOPD') "
            "or k == 'NOTIFY_SOCKET'))"
        ),
        env={"PATH": os.environ["PATH"], "LOOPD_HOME": "/x", "NOTIFY_SOCKET": "/y"},
    )
    assert result.final_text == "[]"


ESCAPING_AGENT = """
    import os, sys, time
    pids = sys.argv[1]
    # A grandchild that leaves the session (double fork + setsid), then hangs.
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(pids, "a") as fh:
                fh.write(f"{os.getpid()}\\n")
            time.sleep(300)
        os._exit(0)
    # A background child in the agent's own group.
    if os.fork() == 0:
        with open(pids, "a") as fh:
            fh.write(f"{os.getpid()}\\n")
        time.sleep(300)
    os.wait()  # the middle process of the double fork
    while open(pids).read().count("\\n") < 2:
        time.sleep(0.01)
    print("agent is hanging", flush=True)
    time.sleep(300)
"""


def test_timeout_kills_the_whole_tree_even_escaped_grandchildren(
    work: Path, transcript: Transcript, tmp_path: Path
) -> None:
    pids_file = tmp_path / "pids"
    pids_file.touch()
    result = supervise(
        command_adapter(),
        transcript,
        work,
        script(ESCAPING_AGENT) + [str(pids_file)],
        timeout=3.0,
    )
    assert result.timed_out and result.killed
    assert result.exit_code == -15
    pids = [int(p) for p in pids_file.read_text().split()]
    assert len(pids) == 2
    assert not any(alive(pid) for pid in [result.pid, *pids])
    assert our_zombies() == []
    assert any(r.get("event") == "timeout" for r in records(transcript.path))


def test_leftovers_of_an_agent_that_exits_are_killed(
    work: Path, transcript: Transcript, tmp_path: Path
) -> None:
    pids_file = tmp_path / "pids"
    body = """
        import os, subprocess, sys, time
        child = subprocess.Popen(
            [sys.executable, "-c", "import os, time; os.setsid(); time.sleep(300)"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        open(sys.argv[1], "w").write(str(child.pid))
        print("bye")
    """
    result = supervise(command_adapter(), transcript, work, script(body) + [str(pids_file)])
    assert result.exit_code == 0 and not result.killed
    assert not alive(int(pids_file.read_text()))
    assert our_zombies() == []


def test_an_agent_ignoring_sigterm_gets_sigkill(work: Path, transcript: Transcript) -> None:
    body = """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ignoring SIGTERM", flush=True)
        time.sleep(300)
    """
    result = supervise(
        command_adapter(), transcript, work, script(body), timeout=1.5, kill_grace=0.5
    )
    assert result.timed_out
    assert result.exit_code == -9
    assert not alive(result.pid)


def test_silence_is_a_stall(work: Path, transcript: Transcript) -> None:
    body = """
        import time
        print("thinking...", flush=True)
        time.sleep(300)
    """
    result = supervise(command_adapter(), transcript, work, script(body), stall_after=1.0)
    assert result.stall == "silence" and result.killed and not result.timed_out
    stalls = [r for r in records(transcript.path) if r["type"] == "stall"]
    assert len(stalls) == 1 and stalls[0]["kind"] == "silence"
    assert stalls[0]["stream"] == "loopd"


def test_file_changes_without_output_are_not_a_stall(work: Path, transcript: Transcript) -> None:
    (work / ".git").mkdir()
    body = """
        import time, pathlib
        print("working quietly", flush=True)
        for i in range(1000):
            pathlib.Path("src").mkdir(exist_ok=True)
            pathlib.Path("src/out.txt").write_text(str(i))
            time.sleep(0.2)
    """
    result = supervise(
        command_adapter(), transcript, work, script(body), stall_after=2.0, timeout=6.0
    )
    assert result.stall is None
    assert result.timed_out


def test_changes_inside_git_do_not_count(work: Path, transcript: Transcript) -> None:
    (work / ".git").mkdir()
    body = """
        import time, pathlib
        print("only touching .git", flush=True)
        for i in range(1000):
            pathlib.Path(".git/index").write_text(str(i))
            time.sleep(0.2)
    """
    result = supervise(
        command_adapter(), transcript, work, script(body), stall_after=1.0, timeout=20.0
    )
    assert result.stall == "silence"


def test_the_same_tool_call_three_times_in_a_row_is_a_stall(
    work: Path, transcript: Transcript
) -> None:
    body = """
        import json, time
        call = {"type": "tool_call", "tool": "read_file", "arguments": {"path": "a.py"}}
        other = {"type": "tool_call", "tool": "read_file", "arguments": {"path": "b.py"}}
        result = {"type": "tool_result", "tool": "read_file", "output": "x = 1"}
        for event in (call, result, other, result, call, result, call, result, call):
            print(json.dumps(event), flush=True)
        time.sleep(300)
    """
    result = supervise(json_adapter(), transcript, work, script(body))
    assert result.stall == "repeated_tool_call" and result.killed
    assert result.tool_call_count == 5
    stall = [r for r in records(transcript.path) if r["type"] == "stall"][0]
    assert stall["kind"] == "repeated_tool_call" and stall["tool"] == "read_file"


def test_events_are_accounted(work: Path, transcript: Transcript) -> None:
    events = [
        {"type": "session", "session_id": "s-123"},
        {"type": "text", "text": "Looking at the code."},
        {"type": "tool_call", "tool": "shell", "call_id": "1", "arguments": {"cmd": "ls"}},
        {"type": "tool_result", "tool": "shell", "call_id": "1", "denied": True},
        {"type": "usage", "input_tokens": 100, "output_tokens": 20, "cost_usd": 0.5},
        {"type": "usage", "input_tokens": 50, "output_tokens": 5, "cost_usd": 0.25},
        {"type": "final", "text": f"Done; the key was {AWS_KEY_ID}."},
        {"type": "text", "text": "trailing chatter"},
    ]
    lines = "\n".join(json.dumps(e) for e in events) + "\nnot json at all"
    seen: list[str] = []
    sup = Supervisor(
        json_adapter(),
        transcript,
        work,
        {"PATH": os.environ["PATH"]},
        on_event=lambda e: seen.append(e.type),
    )
    result = sup.run(Invocation(argv=[PY, "-c", f"print({lines!r})"]), timeout=20, stall_after=20)
    assert result.session_id == "s-123"
    assert result.final_text == "Done; the key was [REDACTED:aws-access-key]."
    assert (result.input_tokens, result.output_tokens) == (150, 25)
    assert result.cost_usd == pytest.approx(0.75)
    assert result.denied
    assert [(c.tool, c.arguments) for c in result.tool_calls] == [("shell", {"cmd": "ls"})]
    assert result.events == len(events) + 1
    assert seen == [e["type"] for e in events] + ["raw"]
    written = [r for r in records(transcript.path) if r["stream"] == "stdout"]
    assert written[0]["raw"] == json.dumps(events[0])  # a parsed line keeps its raw text
    assert written[-1] == {
        "ts": written[-1]["ts"],
        "stream": "stdout",
        "type": "raw",
        "text": "not json at all",
    }


def test_stop_from_another_thread(work: Path, transcript: Transcript) -> None:
    sup = Supervisor(
        command_adapter(), transcript, work, {"PATH": os.environ["PATH"]}, kill_grace=1.0
    )
    body = script("import time; print('running', flush=True); time.sleep(300)")
    timer = threading.Timer(0.5, sup.stop, kwargs={"grace": 0, "reason": "cancelled"})
    timer.start()
    result = sup.run(Invocation(argv=body), timeout=30, stall_after=30)
    timer.join()
    assert result.stopped and result.killed and result.stop_reason == "cancelled"
    assert not alive(result.pid)
    # A stopped supervisor starts nothing more (a nudge racing with a cancel).
    again = sup.run(Invocation(argv=body), timeout=30, stall_after=30)
    assert again.stopped and again.exit_code is None and again.pid == 0


def test_stop_with_grace_lets_the_agent_finish(work: Path, transcript: Transcript) -> None:
    sup = Supervisor(command_adapter(), transcript, work, {"PATH": os.environ["PATH"]})
    body = script("""
        import time
        print("finishing", flush=True)
        time.sleep(1.0)
        print("finished")
    """)
    timer = threading.Timer(0.2, sup.stop, kwargs={"grace": 60, "reason": "shutdown"})
    timer.start()
    result = sup.run(Invocation(argv=body), timeout=30, stall_after=30)
    timer.join()
    assert result.stopped and not result.killed
    assert result.exit_code == 0 and result.final_text == "finished"


def test_transcript_cap_and_its_single_marker(work: Path, tmp_path: Path) -> None:
    cap = 40_000
    transcript = Transcript(tmp_path / "capped.jsonl", cap_bytes=cap)
    body = "for i in range(5000): print(f'line {i} ' + 'x' * 50)"
    result = supervise(command_adapter(), transcript, work, script(body))
    transcript.close()
    assert result.exit_code == 0
    assert result.final_text.startswith("line 4999 ")  # accounting goes on past the cap
    lines = records(transcript.path)
    assert transcript.path.stat().st_size <= cap
    markers = [r for r in lines if r["type"] == "truncated"]
    assert len(markers) == 1 and lines[-1] == markers[0]
    assert markers[0]["stream"] == "loopd" and markers[0]["cap_bytes"] == cap
    written = sum(1 for r in lines if r["stream"] == "stdout")
    assert markers[0]["dropped_lines"] == 5000 - written
    assert lines[-2]["type"] == "process" and lines[-2]["event"] == "exited"


def test_a_flood_stays_bounded(work: Path, tmp_path: Path) -> None:
    cap = 1 << 20
    transcript = Transcript(tmp_path / "flood.jsonl", cap_bytes=cap)
    body = """
        import sys
        out = sys.stdout.buffer
        chunk = (b"y" * 1023 + b"\\n") * 1024
        for _ in range(17):
            out.write(chunk)              # 17 MB of ordinary lines
        out.write(b"z" * (3 * 1024 * 1024 + 5))  # one 3 MB line without a newline
        out.flush()
    """
    result = supervise(command_adapter(), transcript, work, script(body), timeout=120)
    transcript.close()
    assert result.exit_code == 0
    assert result.output_bytes == 17 * 1024 * 1024 + 3 * 1024 * 1024 + 5
    assert transcript.path.stat().st_size <= cap
    marker = records(transcript.path)[-1]
    assert marker["type"] == "truncated"
    assert marker["dropped_bytes"] > 19 * 1024 * 1024
    assert len(result.final_text) <= MAX_LINE  # the long line came in pieces


def test_a_missing_program_is_reported(work: Path, transcript: Transcript) -> None:
    result = supervise(command_adapter(), transcript, work, ["/nonexistent/agent-binary"])
    assert result.exit_code is None and "could not start" in result.error
    assert records(transcript.path)[-1]["event"] == "failed"


def test_descendants_follow_parent_links(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            PY,
            "-c",
            "import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
            "print('up', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        below = descendants(proc.pid)
        assert len(below) == 1
        assert proc_info(next(iter(below))).ppid == proc.pid  # type: ignore[union-attr]
    finally:
        kill_tree(proc.pid, proc.pid, grace=1.0)  # the child, reparented to us, is reaped
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]


def test_kill_leftovers_after_a_restart(tmp_path: Path) -> None:
    tree = tmp_path / "worktree"
    (tree / "sub").mkdir(parents=True)
    pids_file = tmp_path / "pids"
    started = datetime.now(UTC).timestamp()
    # Two processes that are not our children: one in a recorded group, one working in the
    # tree; both ignore SIGTERM so that SIGKILL is needed.
    body = """
        import os, signal, sys, time
        tree, pids = sys.argv[1], sys.argv[2]
        if os.fork() == 0:
            os.setsid()
            for cwd in (None, tree + "/sub"):
                if os.fork() == 0:
                    os.setsid()
                    if cwd:
                        os.chdir(cwd)
                    signal.signal(signal.SIGTERM, signal.SIG_IGN)
                    with open(pids, "a") as fh:
                        fh.write(f"{'tree' if cwd else 'group'} {os.getpid()}\\n")
                    time.sleep(300)
                    os._exit(0)
            os._exit(0)
        os.wait()
    """
    subprocess.run(script(body) + [str(tree), str(pids_file)], check=True, timeout=20)
    wait_until(lambda: pids_file.exists() and pids_file.read_text().count("\n") == 2)
    pids = dict(line.split() for line in pids_file.read_text().splitlines())
    group_pid, tree_pid = int(pids["group"]), int(pids["tree"])
    signalled = kill_leftovers([group_pid], tree, grace=0.3, started_after=started)
    assert {group_pid, tree_pid} <= signalled
    wait_until(lambda: not alive(group_pid) and not alive(tree_pid))


def test_killing_one_attempt_spares_a_concurrent_one(tmp_path: Path) -> None:
    in_fresh_interpreter("tests.test_supervisor:kill_one_spare_the_other", tmp_path)


def kill_one_spare_the_other(tmp_path: Path) -> None:
    """The body of the test above, in a process of its own (it looks for the process's
    zombie children)."""
    trees = [tmp_path / "a", tmp_path / "b"]
    for tree in trees:
        tree.mkdir()
    pids_file = tmp_path / "pids"
    pids_file.touch()
    results: dict[str, ProcessResult] = {}

    def run_b() -> None:
        with Transcript(tmp_path / "b.jsonl", cap_bytes=1 << 20) as transcript:
            body = "import time; print('B working', flush=True); time.sleep(4); print('B done')"
            results["b"] = supervise(command_adapter(), transcript, trees[1], script(body))

    other = threading.Thread(target=run_b)
    other.start()
    with Transcript(tmp_path / "a.jsonl", cap_bytes=1 << 20) as transcript:
        results["a"] = supervise(
            command_adapter(),
            transcript,
            trees[0],
            script(ESCAPING_AGENT) + [str(pids_file)],
            timeout=2.0,
        )
    other.join()
    assert results["a"].timed_out
    assert not any(alive(int(pid)) for pid in pids_file.read_text().split())
    assert results["b"].exit_code == 0 and not results["b"].killed
    assert results["b"].final_text == "B done"
    assert our_zombies() == []


def test_reap_orphans_collects_reparented_zombies() -> None:
    set_child_subreaper()
    body = """
        import os
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                print(os.getpid(), flush=True)
                os._exit(0)
            os._exit(0)
        os.wait()
    """
    out = subprocess.run(script(body), capture_output=True, text=True, timeout=20, check=True)
    orphan = int(out.stdout.split()[0])
    wait_until(lambda: (info := proc_info(orphan)) is None or info.state == "Z")
    if proc_info(orphan) is not None:  # reparented to us, a zombie until reaped
        assert proc_info(orphan).ppid == os.getpid()  # type: ignore[union-attr]
        assert reap_orphans() >= 1
    assert proc_info(orphan) is None


def test_loopds_own_children_are_not_taken_for_escaped_agent_processes(
    work: Path, transcript: Transcript, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    helpers: list[subprocess.Popen[bytes]] = []

    def start_a_helper(pid: int) -> None:
        # Like a check or a notification of another run: its own session, started by loopd
        # while the agent runs, working outside the agent's tree.
        helpers.append(
            subprocess.Popen(
                [PY, "-c", "import time; time.sleep(60)"], cwd=elsewhere, start_new_session=True
            )
        )

    sup = Supervisor(
        command_adapter(),
        transcript,
        work,
        {"PATH": os.environ["PATH"]},
        kill_grace=0.5,
        on_start=start_a_helper,
    )
    body = script("import time; print('hanging', flush=True); time.sleep(300)")
    try:
        result = sup.run(Invocation(argv=body), timeout=1.5, stall_after=30)
        assert result.timed_out and not alive(result.pid)
        assert helpers[0].poll() is None  # still running
    finally:
        helpers[0].kill()
        helpers[0].wait()


def test_a_command_in_its_own_group_keeps_its_exit_status_from_the_orphan_reaper() -> None:
    """`run_in_own_group` (a push, the index refresh) starts its command in a session of its
    own, as an agent's escaped leftovers are: reaped as one while it is a zombie, its exit
    status would be read as 0, a failed push as done."""
    reaped: list[int] = []

    def reap_while_a_zombie(pid: int) -> None:
        wait_until(lambda: (info := proc_info(pid)) is not None and info.state == "Z")
        reaped.append(reap_orphans())

    done = run_in_own_group(
        [PY, "-c", "raise SystemExit(3)"], timeout=20, on_start=reap_while_a_zombie
    )
    assert reaped == [0] and done.returncode == 3
