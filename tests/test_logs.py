"""`loopd logs` and `loopd show --diff`: what the agent did, readable and safe in a terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from daemon.state.records import AttemptRecord, RunRecord, RunTrigger
from daemon.state.store import StateStore
from tests.helpers import ROOT, loopd, make_home, make_repo, wait_for
from tests.test_spine import BUGGY, agent_config, loop_file

NOW = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)
# What a hostile (or confused) agent prints: a screen clear, a window title, a cursor move,
# an 8-bit CSI, a carriage return that would overwrite the line, and rich markup.
HOSTILE = (
    "\x1b[2J\x1b]0;pwned\x07\x1b[10;10H\x9b31mred [bold]loud[/bold] [link=http://x]y[/link]\rX"
)


def _line(ts: str, **fields: object) -> str:
    return json.dumps({"ts": ts, **fields}) + "\n"


def _run(home: Path, finished: bool, attempts: int = 1) -> tuple[StateStore, str]:
    """A run record whose attempts' transcripts the test writes itself."""
    store = StateStore(home / "state")
    run = RunRecord(
        id="20261129T020000Z-app-0001",
        loop="app",
        task="Fix [red]it[/red] \x1b[31mnow",
        trigger=RunTrigger(kind="manual", reason="test"),
        started=NOW,
        phase="idle" if finished else "running",
        outcome="succeeded" if finished else None,
        reason="checks pass",
        attempts=[
            AttemptRecord(
                n=n,
                started=NOW + timedelta(minutes=n),
                finished=NOW + timedelta(minutes=n + 1) if finished or n < attempts else None,
                verdict="fine [blink]x[/blink]",
            )
            for n in range(1, attempts + 1)
        ],
    )
    store.save_run(run)
    if not finished:
        store.mark_live(run.id)
    return store, run.id


TRANSCRIPT = (
    _line(
        "2026-11-29T02:01:00.000000Z",
        stream="loopd",
        type="process",
        event="started",
        pid=7,
        argv="qwen -p x",
    )
    + _line(
        "2026-11-29T02:01:01.000000Z", stream="stdout", type="text", text="I will run the tests."
    )
    + _line(
        "2026-11-29T02:01:02.000000Z",
        stream="stdout",
        type="tool_call",
        tool="run_shell_command",
        call_id="c1",
        arguments={"command": "pytest -q"},
    )
    + _line(
        "2026-11-29T02:01:03.000000Z",
        stream="stdout",
        type="tool_result",
        tool="run_shell_command",
        call_id="c1",
        output="\n".join(f"line {i}" for i in range(1, 31)),
        is_error=True,
    )
    + _line("2026-11-29T02:01:04.000000Z", stream="stdout", type="text", text=HOSTILE)
    + _line(
        "2026-11-29T02:01:05.000000Z", stream="loopd", type="stall", kind="silence", detail="5m"
    )
    + _line("2026-11-29T02:01:06.000000Z", stream="loopd", type="nudge", n=1, text="Continue.")
    + _line("2026-11-29T02:01:07.000000Z", stream="stdout", type="final", text="All done.")
    + "not json at all\n"
)


def test_logs_prints_the_transcript_readably_with_tool_output_folded(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    store, run_id = _run(home, finished=True)
    folder = store.attempt_dir(run_id, 1)
    (folder / "transcript.jsonl").write_text(TRANSCRIPT)
    proc = loopd(home, "logs", run_id)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "━━ attempt 1" in out
    assert "02:01:00 ── agent started (pid 7): qwen -p x" in out
    assert "02:01:01 I will run the tests." in out
    assert '▶ run_shell_command {"command": "pytest -q"}' in out
    assert "◀ run_shell_command: 30 lines (failed)" in out
    assert "│ line 4" in out and "line 5" not in out  # folded after four lines
    assert "… 26 more lines folded" in out
    assert "!! stall (silence): 5m" in out and ">> nudge 1: Continue." in out
    assert "■ All done." in out and "not json at all" in out
    full = loopd(home, "logs", run_id, "--full").stdout
    assert "line 30" in full and "folded" not in full


def test_agent_text_in_logs_and_show_has_no_control_sequences_and_no_markup(
    tmp_path: Path,
) -> None:
    home = make_home(tmp_path / "home")
    store, run_id = _run(home, finished=True)
    (store.attempt_dir(run_id, 1) / "transcript.jsonl").write_text(TRANSCRIPT)
    # Even told it is a colour terminal, loopd prints the agent's text as text.
    env = {"FORCE_COLOR": "1", "TERM": "xterm-256color", "COLUMNS": "200"}
    for args in (("logs", run_id), ("show", run_id)):
        proc = loopd(home, *args, env=env)
        assert proc.returncode == 0, proc.stderr
        out = proc.stdout
        for forbidden in ("\x1b]0;", "\x1b[2J", "\x1b[10;10H", "\x9b", "\r", "\x07"):
            assert forbidden not in out, (args, forbidden)
    logs = loopd(home, "logs", run_id, env=env).stdout
    assert "red [bold]loud[/bold] [link=http://x]y[/link]X" in _plain(logs)
    shown = loopd(home, "show", run_id, env=env).stdout
    assert "Fix [red]it[/red] now" in _plain(shown)
    assert "fine [blink]x[/blink]" in _plain(shown)


def _plain(text: str) -> str:
    """Output without the styling rich itself adds (SGR sequences only)."""
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_logs_follows_a_running_attempt_through_appends_and_a_rotation(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    store, run_id = _run(home, finished=False)
    transcript = store.attempt_dir(run_id, 1) / "transcript.jsonl"
    transcript.write_text(
        _line("2026-11-29T02:01:00.000000Z", stream="stdout", type="text", text="first")
    )
    out = tmp_path / "follow.out"
    env = {k: v for k, v in os.environ.items() if k != "LOOPD_HOME"}
    with out.open("w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "daemon.cli.main", "--home", str(home), "logs", run_id, "-f"],
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            env=env,
        )
    try:
        wait_for(lambda: "first" in out.read_text(), what="the first line")
        with transcript.open("a") as fh:
            fh.write(
                _line("2026-11-29T02:01:01.000000Z", stream="stdout", type="text", text="second")
            )
            fh.write(
                '{"ts": "2026-11-29T02:01:02.000000Z", "stream": "stdout", "type": "text", "te'
            )
        wait_for(lambda: "second" in out.read_text(), what="the appended line")
        with transcript.open("a") as fh:  # the rest of the torn line
            fh.write('xt": "third"}\n')
        wait_for(lambda: "third" in out.read_text(), what="the line completed later")
        # Rotated: the file is replaced by a new one, read from its start.
        transcript.rename(transcript.with_name("transcript-1.jsonl"))
        transcript.write_text(
            _line("2026-11-29T02:01:03.000000Z", stream="stdout", type="text", text="fourth")
        )
        wait_for(lambda: "fourth" in out.read_text(), what="the line of the new file")
        assert proc.poll() is None  # the attempt still runs: it goes on following
        run = store.load_run(run_id)
        run.attempts[0].finished = NOW + timedelta(minutes=5)
        store.save_run(run)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = out.read_text()
    assert text.index("first") < text.index("second") < text.index("third") < text.index("fourth")
    assert text.count("second") == 1
    assert "━━ attempt 1 ended ━━" in text


def test_logs_of_an_unknown_run_or_attempt_is_a_usage_error(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    _, run_id = _run(home, finished=True)
    assert loopd(home, "logs", "20990101T000000Z-app-ffff").returncode == 2
    proc = loopd(home, "logs", run_id, "--attempt", "3")
    assert proc.returncode == 2 and "has no attempt 3 (attempts: 1)" in proc.stderr


def test_show_diff_prints_what_each_attempt_changed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    home = make_home(
        tmp_path / "home",
        agent_config(
            "import pathlib; p = pathlib.Path('calc.py'); "
            "p.write_text(p.read_text().replace('a - b', 'a + b') + '# \\x1b[2Jdone\\n')"
        ),
        {"calc": loop_file(repo)},
    )
    proc = loopd(home, "once", "calc")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    diff = loopd(home, "show", run_id, "--diff")
    assert diff.returncode == 0, diff.stderr
    assert (
        f"# attempt 1: {home / 'state' / 'runs' / run_id / 'attempt-1' / 'diff.patch'}"
        in diff.stdout
    )
    assert "-    return a - b" in diff.stdout and "+    return a + b" in diff.stdout
    assert "\x1b" not in diff.stdout and "+# done" in diff.stdout
    assert loopd(home, "show", run_id, "--diff", "--attempt", "2").returncode == 2
    # The transcript of a real run reads as text too.
    logs = loopd(home, "logs", run_id)
    assert logs.returncode == 0 and "── agent started" in logs.stdout
    assert "── agent exited 0" in logs.stdout


def test_logs_json_prints_each_event_as_a_json_line_with_its_attempt(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    store, run_id = _run(home, finished=True, attempts=2)
    (store.attempt_dir(run_id, 1) / "transcript.jsonl").write_text(TRANSCRIPT)
    (store.attempt_dir(run_id, 2) / "transcript.jsonl").write_text(
        _line("2026-11-29T02:03:00.000000Z", stream="stdout", type="final", text="Second.")
    )
    proc = loopd(home, "logs", run_id, "--json")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(events) == len(TRANSCRIPT.splitlines()) + 1  # no headers, every event
    assert [e["attempt"] for e in events] == [1] * (len(events) - 1) + [2]
    assert events[0]["type"] == "process" and events[0]["pid"] == 7
    assert events[2]["arguments"] == {"command": "pytest -q"}
    assert any(e.get("text") == HOSTILE for e in events)  # kept whole, as data
    assert "\x1b" not in proc.stdout and "\x9b" not in proc.stdout  # escaped, never raw
    assert events[-2] == {
        "attempt": 1,
        "stream": "stdout",
        "type": "raw",
        "text": "not json at all",
    }
    assert events[-1]["text"] == "Second."
    only = loopd(home, "logs", run_id, "--attempt", "2", "--json").stdout.splitlines()
    assert [json.loads(line)["text"] for line in only] == ["Second."]


def test_logs_into_a_reader_that_stops_early_ends_quietly(tmp_path: Path) -> None:
    # `loopd logs RUN | head`: head closes the pipe after a few lines; loopd must not print a
    # traceback about it. The transcript is longer than a pipe's buffer, so the write fails.
    home = make_home(tmp_path / "home")
    store, run_id = _run(home, finished=True)
    folder = store.attempt_dir(run_id, 1)
    line = _line("2026-11-29T02:01:01.000000Z", stream="stdout", type="text", text="x" * 200)
    (folder / "transcript.jsonl").write_text(line * 2000)
    env = {k: v for k, v in os.environ.items() if k != "LOOPD_HOME"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli.main", "--home", str(home), "logs", run_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert b"attempt 1" in proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err
