"""Notifications: a command gets the message as its last argument; a webhook gets a JSON POST."""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from daemon.config import NotifyConfig
from daemon.people.escalation import write_escalation
from daemon.people.notify import (
    CommandNotifier,
    Notifications,
    NotifyError,
    WebhookNotifier,
    notifiers_from_config,
)
from daemon.retry import RetryPolicy
from daemon.state.store import StateStore
from tests.test_escalations import three_failed

NOW = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)
ARGV_SCRIPT = """\
import json, os, sys
with open(sys.argv[1], "w") as fh:
    json.dump({"argv": sys.argv[1:], "event": os.environ.get("LOOPD_EVENT"),
               "socket": os.environ.get("NOTIFY_SOCKET"), "env": sorted(os.environ)}, fh)
"""


class Receiver(BaseHTTPRequestHandler):
    """Records POST bodies; answers with the next status (or (status, headers)) of the script."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        server: Any = self.server
        answer = server.statuses.pop(0) if server.statuses else 200
        status, headers = answer if isinstance(answer, tuple) else (answer, {})
        server.bodies.append((status, self.headers["Content-Type"], json.loads(body)))
        self.send_response(status)
        self.send_header("Content-Length", "0")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def webhook_server() -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    server.bodies = []
    server.statuses = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def events_of(store: StateStore, type: str) -> list[dict[str, Any]]:
    return [e for e in store.events.read() if e["type"] == type]


def test_command_gets_the_message_as_its_last_argument_without_a_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", "/run/should-not-leak")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_should_not_leak")
    monkeypatch.setenv("LOOPD_VERIFIER_KEY", "sk-should-not-leak")
    script = tmp_path / "argv.py"
    script.write_text(ARGV_SCRIPT)
    out = tmp_path / "argv.json"
    store = StateStore(tmp_path / "state")
    notes = Notifications(
        NotifyConfig(command=[sys.executable, str(script), str(out)]), store.events
    )
    message = "loopd: app needs a person; $(touch pwned) `id` > x"
    notes.notify("escalated", message, {"loop": "app", "run": "R1"}, NOW)
    assert notes.drain(30)

    seen = json.loads(out.read_text())
    assert seen["argv"] == [str(out), message]
    assert seen["event"] == "escalated" and seen["socket"] is None
    # A minimal environment: what reaches a person, none of loopd's keys or tokens.
    assert not {"AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "LOOPD_VERIFIER_KEY"} & set(seen["env"])
    assert "PATH" in seen["env"] and "LOOPD_RUN" in seen["env"]
    assert not (tmp_path / "pwned").exists()
    (event,) = events_of(store, "notified")
    assert (event["notifier"], event["loop"], event["run"]) == ("command", "app", "R1")


def test_a_failing_command_is_an_event(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    notes = Notifications(
        NotifyConfig(command=[sys.executable, "-c", "import sys; sys.exit('boom')"]),
        store.events,
    )
    notes.notify("escalated", "hello", {"loop": "app", "run": "R1"}, NOW)
    assert notes.drain(30)
    (event,) = events_of(store, "notify_failed")
    assert event["notifier"] == "command" and "exited 1: boom" in event["error"]
    assert event["asked"] == "2026-11-29T06:00:00.000000Z"


def test_a_command_past_its_timeout_is_killed() -> None:
    notifier = CommandNotifier([sys.executable, "-c", "import time; time.sleep(60)"], timeout=0.3)
    with pytest.raises(NotifyError, match="did not finish within 0.3s"):
        notifier.send("hello", {})


def test_webhook_posts_the_escalation_as_json(tmp_path: Path, webhook_server: Any) -> None:
    store = StateStore(tmp_path / "state")
    run = three_failed(tmp_path, store)
    path = write_escalation(store, run, NOW)
    url = f"http://127.0.0.1:{webhook_server.server_address[1]}/hook?token=abc"
    notes = Notifications(NotifyConfig(webhook=url), store.events)
    notes.escalated(run, path, NOW)
    assert notes.drain(30)

    ((status, content_type, body),) = webhook_server.bodies
    assert (status, content_type) == (200, "application/json")
    assert body["kind"] == "escalated" and body["run"] == run.id and body["loop"] == "app"
    assert body["text"].startswith("loopd: app needs a person")
    assert str(path) in body["text"]
    assert [a["score"] for a in body["attempts"]] == [2, 3, 4]
    assert "## Last failure of the checks" in body["escalation"]
    assert body["branch"] == run.branch
    assert events_of(store, "notified")[0]["notifier"] == "webhook"


def test_webhook_retries_with_exponential_backoff(webhook_server: Any) -> None:
    webhook_server.statuses = [500, 503, 200]
    waits: list[float] = []
    url = f"http://127.0.0.1:{webhook_server.server_address[1]}/"
    WebhookNotifier(url, retry=RetryPolicy(first=1.0, tries=4), sleep=waits.append).send(
        "hi", {"run": "R"}
    )
    assert [s for s, _, _ in webhook_server.bodies] == [500, 503, 200]
    assert waits == [1.0, 2.0]


def test_webhook_waits_what_retry_after_asks(webhook_server: Any) -> None:
    webhook_server.statuses = [(429, {"Retry-After": "20"}), 200]
    waits: list[float] = []
    url = f"http://127.0.0.1:{webhook_server.server_address[1]}/"
    WebhookNotifier(url, sleep=waits.append).send("hi", {})
    assert waits == [20.0] and len(webhook_server.bodies) == 2


def test_webhook_gives_up_at_once_on_a_retry_after_past_its_policy(webhook_server: Any) -> None:
    webhook_server.statuses = [(503, {"Retry-After": "3600"})] * 4
    waits: list[float] = []
    url = f"http://127.0.0.1:{webhook_server.server_address[1]}/"
    with pytest.raises(NotifyError, match=r"after 1 tries: HTTP 503; .* retry after 3600s"):
        WebhookNotifier(url, sleep=waits.append).send("hi", {})
    assert waits == [] and len(webhook_server.bodies) == 1


def test_drain_cuts_the_retry_waits_short_and_records_the_failure(tmp_path: Path) -> None:
    """loopd exiting does not sit out a dead webhook's backoff: one more try, then the event."""
    store = StateStore(tmp_path / "state")
    config = NotifyConfig(webhook=f"http://127.0.0.1:{dead_port()}/hook")
    notes = Notifications(config, store.events)  # the real policy, waits of 1, 2 and 4 s
    notes.notify("escalated", "hello", {"loop": "app", "run": "R9"}, NOW)
    assert notes.drain(60)
    (event,) = events_of(store, "notify_failed")
    assert "failed after 2 tries" in event["error"]


def test_webhook_does_not_repeat_a_request_the_server_rejects(webhook_server: Any) -> None:
    webhook_server.statuses = [404]
    url = f"http://127.0.0.1:{webhook_server.server_address[1]}/"
    with pytest.raises(NotifyError, match="HTTP 404"):
        WebhookNotifier(url, sleep=lambda s: None).send("hi", {})
    assert len(webhook_server.bodies) == 1


def dead_port() -> int:
    """A port nobody listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_dead_webhook_never_blocks_and_its_failure_is_an_event(tmp_path: Path) -> None:
    port = dead_port()
    store = StateStore(tmp_path / "state")
    gate = threading.Event()
    waits: list[float] = []

    def held_backoff(seconds: float) -> None:
        waits.append(seconds)
        gate.wait(30)  # the delivery stays stuck until the test lets it go

    webhook = WebhookNotifier(f"http://127.0.0.1:{port}/hook", timeout=2, sleep=held_backoff)
    notes = Notifications(NotifyConfig(), store.events, notifiers=[webhook])
    (thread,) = notes.notify("escalated", "hello", {"loop": "app", "run": "R9"}, NOW)

    # notify has returned while the delivery is still retrying in its thread
    assert thread.is_alive()
    assert events_of(store, "notify_failed") == []
    gate.set()
    assert notes.drain(60)
    (event,) = events_of(store, "notify_failed")
    assert (event["loop"], event["run"], event["notifier"]) == ("app", "R9", "webhook")
    assert f"127.0.0.1:{port}" in event["error"] and "failed after 4 tries" in event["error"]
    assert "/hook" not in event["error"]  # a webhook's path may hold a token
    assert waits == [1.0, 2.0, 4.0]


def test_notify_on_decides_the_other_outcomes(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    run = three_failed(tmp_path, store)
    sent: list[tuple[str, str]] = []

    class Recorder(CommandNotifier):
        def send(self, message: str, payload: dict[str, Any]) -> None:
            sent.append((payload["kind"], message))

    notes = Notifications(NotifyConfig(), store.events, notifiers=[Recorder(["x"])])
    run.outcome = "succeeded"
    notes.run_finished(run, ["escalated"], NOW)
    notes.run_finished(run, ["escalated", "succeeded"], NOW)
    notes.attempt_failed(run, run.attempts[0], ["escalated"], NOW)
    notes.attempt_failed(run, run.attempts[0], ["failed-attempt"], NOW)
    run.outcome = "escalated"
    notes.run_finished(run, ["escalated", "succeeded"], NOW)  # escalations go by escalated()
    assert notes.drain(30)
    assert sorted(kind for kind, _ in sent) == ["failed-attempt", "succeeded"]
    assert any("attempt 1 failed (checks failed, score 2/10): Fix add()." in m for _, m in sent)


def test_notifiers_from_config() -> None:
    assert notifiers_from_config(NotifyConfig()) == []
    made = notifiers_from_config(NotifyConfig(command=["notify-send"], webhook="https://h/x"))
    assert [n.name for n in made] == ["command", "webhook"]
    with pytest.raises(ValueError, match="not an http"):
        WebhookNotifier("file:///etc/passwd")
