"""One reader (issue 44, point 3): each view's `/api/...` JSON is what its command prints with
`--json`, run here as a subprocess on the same home (docs/console.md, "The read API")."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta

import pytest

from daemon.redact import redact_value
from tests.helpers import loopd
from tests.test_web_console import NOW, Web, _home

# The module's served home (a module fixture) is made once: its tests stay on one worker
# under pytest-xdist (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("web-read-api")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Web, list]]:
    home, records = _home(tmp_path_factory.mktemp("read-api"))
    server = Web(home)
    server.login()
    yield server, records
    server.stop()


def _same(server: Web, path: str, *argv: str) -> object:
    """The console's JSON at `path` and `loopd ARGV --json`'s, equal once redacted (every page
    and the API show nothing redaction hides; the command prints the record as it is)."""
    status, text = server.get(path)
    assert status == 200, (path, text)
    printed = loopd(server.home, *argv, "--json")
    assert printed.returncode == 0, printed.stderr
    assert json.loads(text) == redact_value(json.loads(printed.stdout)), path
    return json.loads(text)


def test_status(served: tuple[Web, list]) -> None:
    server, _ = served
    data = _same(server, "/api/status", "status")
    assert "toolz" in data["loops"]


def test_runs(served: tuple[Web, list]) -> None:
    server, records = served
    data = _same(server, "/api/runs", "runs", "--limit", "50")  # the default, as the CLI's
    assert {r["run"] for r in data} == {r.id for r in records}
    assert len(_same(server, "/api/runs?limit=2", "runs", "--limit", "2")) == 2
    _, page = server.get("/runs?limit=2")  # the page lists as many, and offers more
    assert page.count("<li>") == 2 and "limit=8" in page
    night = (NOW - timedelta(days=1)).date().isoformat()
    argv = ("runs", "toolz", "--limit", "200", "--night", night)
    data = _same(server, f"/api/runs?loop=toolz&night={night}&limit=200", *argv)
    assert data and {r["run"] for r in data} <= {r.id for r in records}


def test_a_run(served: tuple[Web, list]) -> None:
    server, records = served
    for record in records:
        data = _same(server, f"/api/runs/{record.id}", "show", record.id)
        assert data["run"] == record.id
    assert "[REDACTED:github-token]" in str(data)  # the last run's task held a token


def test_escalations(served: tuple[Web, list]) -> None:
    server, records = served
    data = _same(server, "/api/escalations", "escalations", "list")
    assert records[1].id in [e["run"] for e in data]
    one = _same(server, f"/api/escalations/{records[1].id}", "escalations", "show", records[1].id)
    assert one["text"]


def test_rules(served: tuple[Web, list]) -> None:
    server, _ = served
    data = _same(server, "/api/rules", "rules", "list", "--all")
    assert {r["id"] for r in data} == {"r-0001-trial-one", "r-0002-old"}


def test_a_record_changed_on_disk_is_read_again(served: tuple[Web, list]) -> None:
    """The console keeps parsed records by their bytes: a record written anew is read anew."""
    from daemon.state.store import StateStore

    server, records = served
    run_id = records[0].id
    before = _same(server, f"/api/runs/{run_id}", "show", run_id)
    store = StateStore(server.home / "state")
    run = store.load_run(run_id)
    run.reason = "changed while the console ran"
    store.save_run(run)
    after = _same(server, f"/api/runs/{run_id}", "show", run_id)
    assert after["reason"] == "changed while the console ran" != before["reason"]
    assert [r["reason"] for r in _same(server, "/api/runs", "runs") if r["run"] == run_id] == [
        "changed while the console ran"
    ]


def test_parsed_records_are_copies() -> None:
    from daemon.state.parsed import keep_parsed, parse_toml

    keep_parsed(10)
    try:
        data = b'id = "a"\n[[attempts]]\nn = 1\n'
        first = parse_toml(data)
        first["attempts"].append({"n": 2})  # a reader changing what it was given
        assert parse_toml(data) == {"id": "a", "attempts": [{"n": 1}]}
    finally:
        keep_parsed(0)
