"""A verifier outage never holds the machine: a run waiting in `judging` gives its slot to
another loop's run; status shows the verifier unreachable; one notification when the outage
passes 10 minutes, one when it ends.

`loopd run` as a real process with the verifier's port closed; the notifications in process
with an injected clock and a real notify command.
"""

from __future__ import annotations

import json
import socket
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from daemon.home import Home
from daemon.people.notify import Notifications
from daemon.runparts.services import RunServices
from daemon.service.context import Context, Flags
from daemon.service.verifier import VerifierWatch
from tests.helpers import (
    daemon_log,
    events,
    loopd,
    make_home,
    make_repo,
    runs,
    start_daemon,
    stop_daemon,
    wait_for,
)

FIXER = (
    "import pathlib; p = pathlib.Path('calc.py'); "
    "p.write_text(p.read_text().replace('a - b', 'a + b'))"
)
BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5\n",
}


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_run_waiting_for_the_verifier_frees_its_slot_for_another_loop(
    tmp_path: Path, daemons: list
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    fixer = [sys.executable, "-c", FIXER]
    config = (
        f'[verifier]\nbase_url = "http://127.0.0.1:{closed_port()}/v1"\nmodel = "critic"\n'
        'timeout = "2s"\npending_limit = "1h"\n'
        f'[agents.fixer]\nadapter = "command"\ncommand = {json.dumps(fixer)}\n'
        f'[limits]\nmax_concurrent_runs = 1\nworktrees = "{tmp_path / "worktrees"}"\n'
    )
    common = f'repo = "{repo}"\nagent = "fixer"\ndone_when = ["python3 check.py"]\nmax_nudges = 0\n'
    home = make_home(
        tmp_path / "home",
        config,
        {
            "judged": common + 'task = "Fix add(); a critic judges it."\n',
            "unjudged": common + 'task = "Fix add(); the checks decide."\ncritic = "off"\n',
        },
    )
    daemon = start_daemon(home)
    daemons.append(daemon)
    assert loopd(home, "trigger", "judged").returncode == 0
    wait_for(
        lambda: any(e["type"] == "verifier_unavailable" for e in events(home)),
        timeout=60,
        what="the judged run to find the verifier down",
    )
    # The only slot is taken by a run waiting for the verifier, yet the other loop runs.
    proc = loopd(home, "trigger", "unjudged", "--wait", timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr + daemon_log(home)
    judged = next(r for r in runs(home) if r["loop"] == "judged")
    assert judged["phase"] == "judging" and "outcome" not in judged
    status = json.loads(loopd(home, "status", "--json").stdout)
    verifier = status["verifier"]
    assert verifier["reachable"] is False and "unreachable" in verifier["last_error"]
    assert status["loops"]["judged"]["phase"] == "judging"
    text = loopd(home, "status", env={"COLUMNS": "300"}).stdout
    assert "verifier: UNREACHABLE since" in text
    assert stop_daemon(daemon) == 0
    # Stopped mid-judging: it resumes judging at the next start, as before.
    judged = next(r for r in runs(home) if r["loop"] == "judged")
    assert judged["phase"] == "judging" and "outcome" not in judged


def watch(tmp_path: Path, sent: Path) -> tuple[VerifierWatch, RunServices, list[datetime]]:
    notifier = [
        sys.executable,
        "-c",
        f"import sys; open({str(sent)!r}, 'a').write(sys.argv[1] + '\\n')",
    ]
    config = (
        '[verifier]\nbase_url = "http://127.0.0.1:9/v1"\n'
        f"[notify]\ncommand = {json.dumps(notifier)}\n"
    )
    home = Home(make_home(tmp_path / "home", config))
    loaded = home.load()
    store = home.state()
    now = [datetime(2026, 11, 30, 2, 0, tzinfo=UTC)]
    services = RunServices(home=home, config=loaded.daemon, store=store, clock=lambda: now[0])
    services.notifications = Notifications(loaded.daemon.notify, store.events)
    ctx = Context(
        home=home,
        store=store,
        flags=Flags(),
        config=loaded,
        services=services,
        clock=lambda: now[0],
    )
    return VerifierWatch(ctx), services, now


def lines(sent: Path, services: RunServices) -> list[str]:
    services.notifications.drain(10)
    return sent.read_text().splitlines() if sent.exists() else []


def test_one_notification_when_the_outage_passes_10_minutes_and_one_when_it_ends(
    tmp_path: Path,
) -> None:
    sent = tmp_path / "sent"
    watcher, services, now = watch(tmp_path, sent)
    start = now[0]
    services.verifier.failed("unreachable (connection refused)", start)
    for minutes in (1, 5, 9):
        now[0] = start + timedelta(minutes=minutes)
        services.verifier.failed("unreachable (connection refused)", now[0])
        watcher.tick(now[0])
    assert lines(sent, services) == []
    now[0] = start + timedelta(minutes=10, seconds=1)
    watcher.tick(now[0])
    for minutes in (11, 30, 90):
        now[0] = start + timedelta(minutes=minutes)
        services.verifier.failed("unreachable (connection refused)", now[0])
        watcher.tick(now[0])
    (down,) = lines(sent, services)
    assert "has been unreachable for 10 min" in down and "connection refused" in down
    status = watcher.status()
    assert status is not None and status.reachable is False and status.since == start
    services.verifier.answered(start + timedelta(hours=2))
    now[0] = start + timedelta(hours=2, seconds=5)
    watcher.tick(now[0])
    watcher.tick(now[0])
    down, up = lines(sent, services)
    assert "answers again, after 2h00m down" in up
    types = [e["type"] for e in services.store.events.read()]
    assert types.count("verifier_down") == 1 and types.count("verifier_up") == 1


def test_an_outage_shorter_than_10_minutes_notifies_nobody(tmp_path: Path) -> None:
    sent = tmp_path / "sent"
    watcher, services, now = watch(tmp_path, sent)
    start = now[0]
    services.verifier.failed("HTTP 503", start)
    now[0] = start + timedelta(minutes=9)
    watcher.tick(now[0])
    services.verifier.answered(now[0])
    now[0] = start + timedelta(minutes=20)
    watcher.tick(now[0])
    assert lines(sent, services) == []
    assert watcher.status().reachable is True  # type: ignore[union-attr]
