"""A full disk under `state/`: a real tmpfs that fills, `loopd run` with [listen], real git.

Nothing is lost (a delivery whose trigger could not be written answers 503 and its retry,
under the same id, is taken once space returns) and nothing stops (the daemon stays up,
tells the person once through [notify], and goes on by itself when space returns).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import daemon_log, loopd, make_home, runs, start_daemon, stop_daemon, wait_for
from tests.listening import (
    SECRET,
    SECRET_ENV,
    delivery,
    home_config,
    hosted,
    listening_port,
    loop_file,
    of_type,
    post,
    push_commit,
    require_module,
)

pytestmark = pytest.mark.xdist_group("full-disk")

require_module("uvicorn", "listen")

FILLER = "filler.bin"


@contextlib.contextmanager
def tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """`folder` as a tmpfs of `size`, unmounted after; a mount that fails skips, or fails
    with CI=true (conftest turns the skip into a failure)."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (root needed): {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> None:
    """Write `folder/FILLER` until the disk is full."""
    chunk = b"\0" * 65536
    with open(folder / FILLER, "ab") as fh:
        try:
            while True:
                fh.write(chunk)
                fh.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    # The last partial blocks too: nothing at all is left.
    fd = os.open(folder / FILLER, os.O_WRONLY | os.O_APPEND)
    try:
        while True:
            try:
                os.write(fd, b"\0" * 512)
            except OSError:
                break
    finally:
        os.close(fd)


def free(folder: Path) -> None:
    (folder / FILLER).unlink()


def notifier(log: Path) -> str:
    """[notify] command appending each message to `log` (outside the tmpfs)."""
    script = (
        f"import sys; open({str(log)!r}, 'a').write(sys.argv[1].replace(chr(10), ' ') + chr(10))"
    )
    return f"\n[notify]\ncommand = {json.dumps([sys.executable, '-I', '-S', '-c', script])}\n"


@pytest.fixture
def full_home(tmp_path: Path):  # noqa: ANN201
    """A daemon whose state/ is a 6 MB tmpfs; yields (home, port, work, state, notified)."""
    origin, work, loop_repo = hosted(tmp_path)
    notified = tmp_path / "notified.log"
    home = make_home(
        tmp_path / "home",
        home_config(origin) + notifier(notified),
        {"follow": loop_file(loop_repo, "github-r")},
    )
    with tmpfs(home / "state", "6m") as state:
        proc = start_daemon(home, env={SECRET_ENV: SECRET})
        try:
            port = wait_for(lambda: listening_port(home), what="the listener")
            yield home, port, work, state, notified, proc
        finally:
            stop_daemon(proc)


def test_a_delivery_refused_for_a_full_disk_is_taken_when_retried(full_home) -> None:  # noqa: ANN001
    home, port, work, state, _, proc = full_home
    before, after = push_commit(work, "pushed while the disk is full")
    headers, body = delivery("github", "refs/heads/main", before, after)
    fill(state)
    status, text = post(port, "/hooks/github", headers, body)
    assert status == 503, text  # the sender retries a 503
    assert proc.poll() is None, daemon_log(home)
    free(state)
    # The sender's retries: the same delivery id, the same body; 503 until the daemon's
    # next tick finds room, then taken (never 409: the first try left no record of it).
    statuses: list[int] = []
    wait_for(
        lambda: statuses.append(post(port, "/hooks/github", headers, body)[0]) or 202 in statuses
    )
    assert set(statuses) <= {503, 202} and statuses[-1] == 202, statuses
    run = wait_for(lambda: [r for r in runs(home) if r["trigger"].get("new") == after], 60)
    assert len(run) == 1


def test_the_daemon_outlives_a_full_disk_and_resumes_by_itself(full_home) -> None:  # noqa: ANN001
    home, port, work, state, notified, proc = full_home
    fill(state)
    before, after = push_commit(work, "pushed while the disk is full")
    headers, body = delivery("github", "refs/heads/main", before, after)
    assert post(port, "/hooks/github", headers, body)[0] == 503
    message = wait_for(lambda: notified.exists() and notified.read_text(), 30, what="notified")
    assert "state/ is full" in message
    # Several ticks on the full disk: the daemon is still up, and says so once.
    for _ in range(3):
        status, _ = post(port, "/hooks/github", headers, body)
        assert status == 503
    assert proc.poll() is None, daemon_log(home)
    assert notified.read_text().count("state/ is full") == 1
    free(state)
    before, after = push_commit(work, "pushed once space returned")
    headers, body = delivery("github", "refs/heads/main", before, after)
    wait_for(lambda: post(port, "/hooks/github", headers, body)[0] == 202, 30, what="202")
    wait_for(lambda: [r for r in runs(home) if r["trigger"].get("new") == after], 60)
    wait_for(lambda: of_type(home, "state_full"), what="the event state_full")
    assert proc.poll() is None
    # One escalation "state/ is full" for the spell, written once there was room, left open.
    (spell,) = of_type(home, "state_full")
    (escalation,) = full_escalations(home)
    assert spell["escalation"] == escalation["run"] and escalation["status"] == "open"
    text = (home / "state" / "escalations" / f"{escalation['run']}.md").read_text()
    assert "state/ is full" in text and "## Room again" in text, text
    listed = loopd(home, "escalations", "list")
    assert escalation["run"] in listed.stdout, listed.stdout + listed.stderr
    retried = loopd(home, "escalations", "resolve", escalation["run"], "--retry")
    assert retried.returncode == 1 and "nothing to retry" in retried.stderr, retried.stderr
    # A second spell is an episode of its own: one more escalation, not a rewrite.
    before, after = push_commit(work, "pushed while the disk is full again")
    headers, body = delivery("github", "refs/heads/main", before, after)
    fill(state)
    assert post(port, "/hooks/github", headers, body)[0] == 503
    wait_for(lambda: notified.read_text().count("state/ is full") == 2, what="told again")
    free(state)
    wait_for(lambda: len(of_type(home, "state_full")) == 2, 30, what="the second spell")
    assert len(full_escalations(home)) == 2
    resolved = loopd(home, "escalations", "resolve", escalation["run"])
    assert resolved.returncode == 0, resolved.stdout + resolved.stderr
    assert not (home / "state" / "progress" / ".md").exists()


def full_escalations(home: Path) -> list[dict]:
    """The escalations of cause state-full, as `loopd escalations list --all --json` has them."""
    listed = loopd(home, "escalations", "list", "--all", "--json")
    assert listed.returncode == 0, listed.stderr
    return [e for e in json.loads(listed.stdout) if e["cause"] == "state-full"]


CHATTY = (
    "import base64, os, sys, uuid\n"
    "for _ in range(700):\n"
    "    sys.stdout.write(base64.b64encode(os.urandom(1500)).decode() + '\\n')\n"
    "open(f'note-{uuid.uuid4().hex}.txt', 'w').write('done')\n"
)


def test_state_max_holds_while_runs_write(tmp_path: Path) -> None:
    """state/ on a 16 MB disk: no state_max written, so a quarter of it (4 MB). Runs that
    each write 1.4 MB of transcript take it past that within minutes, not an hour: the cap
    comes while they write, and `loopd status` says how old its measure is."""
    import tomllib

    from tests.helpers import loopd

    origin, work, loop_repo = hosted(tmp_path)
    agent = json.dumps([sys.executable, "-I", "-S", "-c", CHATTY])
    home = make_home(
        tmp_path / "home",
        home_config(origin, agent=agent),
        {"chatty": loop_file(loop_repo, "github-r")},
    )
    with tmpfs(home / "state", "16m") as state:
        proc = start_daemon(home, env={SECRET_ENV: SECRET})
        try:
            port = wait_for(lambda: listening_port(home), what="the listener")
            wait_for(lambda: (state / "usage.toml").exists(), what="the first measure")
            first = tomllib.loads((state / "usage.toml").read_text())
            limit = first["limit"]
            assert limit == 4 * 1024 * 1024, first
            for i in range(5):
                before, after = push_commit(work, f"run {i}")
                headers, body = delivery("github", "refs/heads/main", before, after)
                assert post(port, "/hooks/github", headers, body)[0] == 202
                wait_for(
                    lambda a=after: [
                        r for r in runs(home) if r["trigger"].get("new") == a and "outcome" in r
                    ],
                    120,
                    what=f"run {i}",
                )
            evicted = wait_for(lambda: of_type(home, "state_evicted"), 60, what="state_evicted")
            assert evicted[0]["total"] <= limit
            usage = tomllib.loads((state / "usage.toml").read_text())
            assert usage["measured"] > first["measured"] and usage["total"] <= limit
            shown = " ".join(loopd(home, "status", env={"COLUMNS": "200"}).stdout.split())
            assert "(state_max, measured " in shown, shown
            assert proc.poll() is None, daemon_log(home)
        finally:
            stop_daemon(proc)


@pytest.fixture(params=["local", "temporal"])
def engine(request: pytest.FixtureRequest) -> str:
    """The engine's part of loopd.toml ("" for the local engine)."""
    if request.param == "local":
        return ""
    from tests.machines import engine_toml

    server, namespace = request.getfixturevalue("temporal")
    return engine_toml(server.address, namespace)


def test_both_engines_outlive_a_full_disk_and_run_once_there_is_room(
    tmp_path: Path, engine: str
) -> None:
    """Idle on a full state/: the home stays up and says so once; room again: a run."""
    from tests.helpers import make_repo
    from tests.machines import BUGGY, TASK, Machine, command_agent, loop_toml

    root = tmp_path / "machine"
    repo = make_repo(root / "src" / "app", BUGGY)
    fix = (
        "import pathlib; p = pathlib.Path('calc.py'); "
        "p.write_text(p.read_text().replace('a - b', 'a + b'))"
    )
    notified = tmp_path / "notified.log"
    text = (
        command_agent("a", fix)
        + notifier(notified)
        + f'\n[limits]\nworktrees = "{root / "worktrees"}"\n'
        + engine
    )
    loop = {"task": TASK, "agent": "a", "done_when": ["python3 check.py"], "max_attempts": 1,
            "critic": "off", "max_nudges": 0}  # fmt: skip
    home = make_home(root / "loopd-home", text, {"calc": loop_toml(repo, **loop)})
    machine = Machine("machine", root, home, repo)
    with tmpfs(home / "state", "8m") as state:
        proc = machine.start("run")
        try:
            wait_for(lambda: machine.events("daemon_started") or machine.events("worker_started"))
            fill(state)
            message = wait_for(lambda: notified.exists() and notified.read_text(), 60)
            assert "state/ is full" in message
            assert proc.poll() is None, machine.log.read_text()
            free(state)
            wait_for(lambda: machine.events("state_full"), 30, what="the event state_full")
            (spell,) = machine.events("state_full")
            (escalation,) = full_escalations(home)  # one, on either engine
            assert spell["escalation"] == escalation["run"]
            assert machine.loopd("trigger", "calc", "--reason", "room again").returncode == 0
            runs_ = wait_for(
                lambda: [r for r in machine.runs() if r.get("outcome")], 120, what="the run"
            )
            assert runs_[0]["outcome"] == "succeeded", runs_
            assert notified.read_text().count("state/ is full") == 1
            assert proc.poll() is None
        finally:
            machine.stop()


def test_a_spell_left_unended_by_an_earlier_life_is_not_escalated_twice(tmp_path: Path) -> None:
    """A daemon that stopped while state/ was full left the spell's escalation without its
    end: the next life's spell is the same episode and takes it, until room returns."""
    from datetime import UTC, datetime, timedelta

    from daemon.people.floor_escalation import file_full, spell_ended, unended
    from daemon.state.store import StateStore

    store = StateStore(tmp_path / "state")
    began = datetime(2026, 12, 7, 3, 0, tzinfo=UTC)
    assert unended(store) == ""
    eid = file_full(store, began, "the event run_started", began)
    assert file_full(store, began, "again", began + timedelta(seconds=1)) == eid  # once
    assert unended(store) == eid
    spell_ended(store, eid, began + timedelta(minutes=5), 300.0, 4)
    spell_ended(store, eid, began + timedelta(minutes=6), 360.0, 5)  # once, too
    text = store.escalation_path(eid).read_text()
    assert text.count("## Room again") == 1 and "300 s" in text and "4 write(s)" in text
    assert unended(store) == ""  # the next spell is an episode of its own
