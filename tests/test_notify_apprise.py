"""[notify] urls through apprise, against a local HTTP endpoint (apprise's json:// target)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.config import NotifyConfig
from daemon.people.escalation import write_escalation
from daemon.people.notify import Notifications
from daemon.state.store import StateStore
from tests.helpers import loopd, make_home
from tests.listening import require_module
from tests.test_escalations import three_failed
from tests.test_notify import NOW, events_of, webhook_server  # noqa: F401 - the fixture

require_module("apprise", "notify")


def json_url(server: Any, path: str = "notify") -> str:
    return f"json://127.0.0.1:{server.server_address[1]}/{path}"


def test_an_escalation_goes_through_apprise_with_its_file_linked(
    tmp_path: Path,
    webhook_server: Any,  # noqa: F811
) -> None:
    store = StateStore(tmp_path / "state")
    run = three_failed(tmp_path, store)
    path = write_escalation(store, run, NOW)
    notes = Notifications(NotifyConfig(urls=[json_url(webhook_server)]), store.events)
    notes.escalated(run, path, NOW)
    assert notes.drain(30)
    ((status, content_type, body),) = webhook_server.bodies
    assert status == 200 and content_type.startswith("application/json")
    assert body["title"] == "loopd: escalated"
    assert body["message"].startswith("loopd: app needs a person")
    assert body["message"].endswith(f"file://{path}")
    assert events_of(store, "notified")[0]["notifier"] == "apprise"


def test_notify_test_tries_every_target_and_reports_each(
    tmp_path: Path,
    webhook_server: Any,  # noqa: F811
) -> None:
    webhook_server.statuses = [200, 500]
    good, failing = json_url(webhook_server, "good"), json_url(webhook_server, "bad")
    home = make_home(tmp_path / "home", f'[notify]\nurls = ["{good}", "{failing}"]\n')
    proc = loopd(home, "notify", "--test")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert (
        lines[0]
        == "apprise json://127.0.0.1: delivered (it accepted the message; check that it arrived)"
    )
    assert lines[1].startswith("apprise json://127.0.0.1: FAILED:")
    assert len(webhook_server.bodies) == 2
    assert all("loopd test notification" in b["message"] for _, _, b in webhook_server.bodies)


def test_a_url_apprise_does_not_know_is_reported(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", '[notify]\nurls = ["nosuchservice://x/y"]\n')
    proc = loopd(home, "notify", "--test")
    assert proc.returncode == 1
    assert "not a URL apprise knows" in proc.stdout
