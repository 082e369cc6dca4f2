"""The console where it is not `loopd web` at the root: under `[listen] ui = true` at /ui/ of
the daemon's own listener (uvicorn, `loopd run`), and behind a reverse proxy that strips a
path prefix. Login, a page, a POST action with its CSRF and Origin checks, through each."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.helpers import events, loopd, start_daemon, stop_daemon, wait_for
from tests.listening import listening_port
from tests.test_web_console import GITHUB_TOKEN, Web, _home


def _actions_work(client: Web, run_id: str, mount: str) -> None:
    """Log in, read pages and JSON, pause and resume a loop: through `client`'s mount."""
    assert client.request("GET", "/")[0] == 401  # no cookie
    status, response, _ = client.request("GET", f"/login?token={client.token()}")
    assert status == 303 and response.getheader("location") == "./"
    client.cookie = response.getheader("set-cookie", "").split(";")[0]
    status, page = client.get("/")
    assert status == 200 and "toolz" in page
    assert 'href="./static/console.css"' in page and 'href="./runs"' in page
    assert client.get("/static/console.css")[0] == 200
    status, page = client.get(f"/runs/{run_id}")
    assert status == 200 and 'href="../static/console.css"' in page, page[:500]
    assert GITHUB_TOKEN not in page
    listed = loopd(client.home, "runs", "--json", "--limit", "50")
    assert json.loads(client.get("/api/runs")[1]) == json.loads(listed.stdout)
    csrf = client.csrf()
    path = "/loops/toolz/pause"
    assert client.post(path, {"csrf": "0" * 64})[0] == 403
    assert client.post(path, {"csrf": csrf}, Origin="http://evil.example")[0] == 403
    status, response, text = client.request(
        "POST", path, {"csrf": csrf}, Cookie=client.cookie, Origin=client.origin
    )
    assert status == 303, text
    # Relative, so the browser stays under the mount: /MOUNT/loops/toolz/pause -> /MOUNT/
    assert response.getheader("location").startswith("../../?said=")
    paused = [e for e in events(client.home) if e.get("type") == "loop_paused"]
    assert [(e["loop"], e["by"]) for e in paused] == [("toolz", "web")], mount
    assert client.post("/loops/toolz/resume", {"csrf": csrf})[0] == 303


def test_the_console_under_listen_ui(tmp_path: Path) -> None:
    home, records = _home(tmp_path)
    with (home / "loopd.toml").open("a") as fh:
        fh.write('\n[listen]\nbind = "127.0.0.1:0"\nui = true\n')
    proc = start_daemon(home)
    try:
        port = wait_for(lambda: listening_port(home), what="the listener")
        client = Web.attach(home, port, "/ui")
        _actions_work(client, records[0].id, "/ui")
        # /ui itself goes on to /ui/; the listener's own routes are as they were.
        client.prefix = ""
        status, response, _ = client.request("GET", "/ui")
        assert status == 308 and response.getheader("location") == "ui/"
        assert client.request("GET", "/healthz")[0] == 200
        assert client.request("GET", "/runs")[0] == 404  # the console is under /ui/ only
    finally:
        assert stop_daemon(proc) == 0


def test_without_ui_the_listener_serves_no_console(tmp_path: Path) -> None:
    home, _ = _home(tmp_path)
    with (home / "loopd.toml").open("a") as fh:
        fh.write('\n[listen]\nbind = "127.0.0.1:0"\n')
    proc = start_daemon(home)
    try:
        port = wait_for(lambda: listening_port(home), what="the listener")
        client = Web.attach(home, port, "")
        assert client.request("GET", "/ui/")[0] == 404
        assert client.request("GET", "/ui/login?token=x")[0] == 404
    finally:
        assert stop_daemon(proc) == 0


class _Proxy(BaseHTTPRequestHandler):
    """A reverse proxy as docs/console.md's nginx: /loopd/X to the console's /X, Host kept."""

    upstream = 0
    prefix = "/loopd"

    def _forward(self) -> None:
        if not self.path.startswith(self.prefix + "/"):
            self.send_error(404)
            return
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else None
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=60)
        skip = {"connection", "keep-alive", "transfer-encoding"}
        headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
        conn.request(self.command, self.path[len(self.prefix) :], body=body, headers=headers)
        answer = conn.getresponse()
        data = answer.read()
        self.send_response(answer.status)
        for key, value in answer.getheaders():
            if key.lower() not in skip | {"content-length", "server", "date"}:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        conn.close()

    do_GET = do_POST = _forward

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[Web, list]]:
    home, records = _home(tmp_path)
    server = Web(home)
    handler = type("Proxy", (_Proxy,), {"upstream": server.port})
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield Web.attach(home, proxy.server_address[1], "/loopd"), records
    finally:
        proxy.shutdown()
        proxy.server_close()
        server.stop()


def test_behind_a_proxy_under_a_path_prefix(proxied: tuple[Web, list]) -> None:
    client, records = proxied
    _actions_work(client, records[0].id, "/loopd")
    # A login's `next` stays under the prefix: relative to /loopd/login.
    _, response, _ = client.request("GET", f"/login?token={client.token()}&next=escalations")
    assert response.getheader("location") == "./escalations"


def test_ui_without_the_web_extra_stops_the_start_naming_it(tmp_path: Path) -> None:
    shim = tmp_path / "shim" / "starlette"
    shim.mkdir(parents=True)
    # First on the path, it fails as a missing package does.
    (shim / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'starlette'\", name='starlette')\n"
    )
    home, _ = _home(tmp_path / "h")
    with (home / "loopd.toml").open("a") as fh:
        fh.write('\n[listen]\nbind = "127.0.0.1:0"\nui = true\n')
    proc = loopd(home, "run", env={"PYTHONPATH": str(shim.parent)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "[listen] ui needs the Python package 'starlette'" in proc.stderr
    assert "[web]" in proc.stderr  # the command that installs the extra
