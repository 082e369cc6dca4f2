"""`loopd web` (#37, first slice) as a real process on 127.0.0.1 over a home of real run
records: the login token and its cookie, 401 and the rate limit, CSRF and Origin refusals,
read-only, redaction and escaping, the run's JSON equal to `loopd show --json`, actions
recorded as events by `web`, and a page in headless Chromium at 390 px.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlencode

import pytest

from daemon.web.security import csrf_value
from tests import chromium
from tests.helpers import ROOT, events, loopd, wait_for
from tests.orphans import die_with_parent
from tests.report_week import RuleSpec, RunSpec, build_week

GITHUB_TOKEN = "ghp_" + "Zq7XkP2mW9rT4vB8nL3cY6dH1sF5gJ0aE2uQ"
NOW = datetime(2026, 3, 12, 9, 0, tzinfo=UTC)
RUNS = [
    RunSpec(night=1, hour=22, loop="toolz", outcome="succeeded", attempts=1),
    RunSpec(night=1, hour=23, loop="toolz", outcome="escalated", attempts=3, cause="checks-failed"),
    RunSpec(
        night=1,
        hour=1,
        loop="toolz",
        outcome="error",
        attempts=1,
        cause="loopd-error",
        task=f"Fix <b>the</b> bug; push with token {GITHUB_TOKEN}",
    ),
]
RULES = [
    RuleSpec(id="r-0001-trial-one", status="trial", created=3),
    RuleSpec("r-0002-old", "active", 9),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Web:
    """A running `loopd web` and a client of it."""

    def __init__(self, home: Path, *flags: str) -> None:
        self.home, self.port = home, _free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "daemon.cli.main", "--home", str(home), "web"]
            + ["--bind", f"127.0.0.1:{self.port}", *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            text=True,
            preexec_fn=die_with_parent,
        )
        self.origin = f"http://127.0.0.1:{self.port}"
        self.prefix = ""  # where the console is mounted on the server: /ui under [listen]
        wait_for(self._up, timeout=60, what="loopd web listening")
        self.cookie = ""

    @classmethod
    def attach(cls, home: Path, port: int, prefix: str) -> Web:
        """A client of a console another server serves at `prefix` (no `loopd web` started)."""
        client = cls.__new__(cls)
        client.home, client.port, client.prefix, client.cookie = home, port, prefix, ""
        client.origin = f"http://127.0.0.1:{port}"
        return client

    def _up(self) -> bool:
        assert self.proc.poll() is None, self.proc.stdout.read() if self.proc.stdout else ""
        try:
            return self.request("GET", "/static/console.css")[0] == 200
        except OSError:
            return False

    def request(
        self, method: str, path: str, form: dict[str, str] | None = None, **headers: str
    ) -> tuple[int, http.client.HTTPResponse, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        sent = {k.replace("_", "-"): v for k, v in headers.items()}
        body = urlencode(form) if form is not None else None
        if body is not None:
            sent.setdefault("Content-Type", "application/x-www-form-urlencoded")
        conn.request(method, self.prefix + path, body=body, headers=sent)
        response = conn.getresponse()
        text = response.read().decode("utf-8", "replace")
        conn.close()
        return response.status, response, text

    def login(self) -> str:
        status, response, _ = self.request("GET", f"/login?token={self.token()}")
        assert status == 303
        self.cookie = response.getheader("set-cookie", "").split(";")[0]
        return response.getheader("set-cookie", "")

    def token(self) -> str:
        return (self.home / "state" / "web-token").read_text().strip()

    def get(self, path: str) -> tuple[int, str]:
        status, _, text = self.request("GET", path, Cookie=self.cookie)
        return status, text

    def post(self, path: str, form: dict[str, str], **headers: str) -> tuple[int, str]:
        headers = {"Cookie": self.cookie, "Origin": self.origin, **headers}
        status, _, text = self.request(
            "POST", path, form, **{k: v for k, v in headers.items() if v}
        )
        return status, text

    def csrf(self) -> str:
        _, page = self.get("/")  # the loops page always has its forms
        return page.split('name="csrf" value="', 1)[1].split('"', 1)[0]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def _home(tmp: Path) -> tuple[Path, list]:
    home, repo, records = build_week(tmp, NOW, RUNS, RULES)
    argv = [sys.executable, "-c", "pass"]
    with (home / "loopd.toml").open("a") as fh:
        fh.write(f'\n[agents.fixer]\nadapter = "command"\ncommand = {json.dumps(argv)}\n')
    (home / "loops" / "toolz.toml").write_text(
        f'repo = "{repo}"\ntask = "Keep toolz green."\nagent = "fixer"\n'
        'done_when = ["true"]\ncritic = "off"\n'
    )
    return home, records


# The module's served home (a module fixture) is made once: its tests stay on one worker
# under pytest-xdist (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("web-console")


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Web, list]]:
    home, records = _home(tmp_path_factory.mktemp("web"))
    server = Web(home)
    server.login()
    yield server, records
    server.stop()


def test_url_prints_the_token_kept_0600(web: tuple[Web, list]) -> None:
    server, _ = web
    proc = loopd(server.home, "web", "--url", "--bind", f"127.0.0.1:{server.port}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{server.origin}/login?token={server.token()}"
    mode = stat.S_IMODE((server.home / "state" / "web-token").stat().st_mode)
    assert mode == 0o600


def test_no_token_is_401_and_the_cookie_is_httponly_strict(web: tuple[Web, list]) -> None:
    server, _ = web
    assert server.request("GET", "/")[0] == 401
    assert server.request("GET", "/api/runs")[0] == 401
    assert server.request("GET", "/", Cookie="loopd_console=forged")[0] == 401
    assert server.request("GET", "/login?token=wrong")[0] == 401
    cookie = server.login().lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert server.token().lower() not in cookie  # the cookie is derived, not the token
    assert server.get("/")[0] == 200
    # `next` goes on to a page of the console, never elsewhere.
    for wanted, to in (
        ("escalations", "./escalations"),
        ("//evil.example", "./"),
        ("https://evil.example", "./"),
        ("runs/../..", "./"),
    ):
        _, response, _ = server.request("GET", f"/login?token={server.token()}&next={wanted}")
        assert response.getheader("location") == to, wanted


def test_failed_logins_are_rate_limited(tmp_path: Path) -> None:
    home, _ = _home(tmp_path)
    server = Web(home)
    try:
        codes = [server.request("GET", "/login?token=guess")[0] for _ in range(12)]
        assert codes[:10] == [401] * 10 and codes[10:] == [429, 429]
        # Even the right token waits while the address is held.
        assert server.request("GET", f"/login?token={server.token()}")[0] == 429
    finally:
        server.stop()


def test_the_run_json_is_loopd_show_json(web: tuple[Web, list]) -> None:
    server, records = web
    run_id = records[0].id
    status, text = server.get(f"/api/runs/{run_id}")
    assert status == 200
    shown = loopd(server.home, "show", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(text) == json.loads(shown.stdout)
    listed = loopd(server.home, "runs", "--json", "--limit", "200")
    assert json.loads(server.get("/api/runs")[1]) == json.loads(listed.stdout)


def test_requests_at_once_each_get_their_own_commands_output(web: tuple[Web, list]) -> None:
    """Commands run on many threads at once: each request reads its own command's output."""
    server, records = web
    expected = {r.id: json.loads(server.get(f"/api/runs/{r.id}")[1]) for r in records}
    paths = [f"/api/runs/{r.id}" for r in records] * 6
    with ThreadPoolExecutor(max_workers=9) as pool:
        got = list(pool.map(server.get, paths))
    for path, (status, text) in zip(paths, got, strict=True):
        assert status == 200 and json.loads(text) == expected[path.rsplit("/", 1)[1]]


def test_pages_show_the_night_redacted_and_escaped(web: tuple[Web, list]) -> None:
    server, records = web
    secret_run = records[2].id
    for path in (
        "/",
        "/runs",
        "/runs?loop=toolz&outcome=error",
        f"/runs/{secret_run}",
        "/escalations",
        "/rules",
        f"/api/runs/{secret_run}",
        "/api/escalations",
    ):
        status, text = server.get(path)
        assert status == 200, (path, text)
        assert GITHUB_TOKEN not in text, path
    _, page = server.get(f"/runs/{secret_run}")
    assert "Fix &lt;b&gt;the&lt;/b&gt; bug" in page and "<b>the</b>" not in page
    assert "REDACTED" in page
    _, runs = server.get("/runs?outcome=error")
    assert secret_run in runs and records[0].id not in runs
    _, esc = server.get("/escalations")
    assert esc.index(records[1].id) < esc.index(records[2].id)  # oldest first
    assert "The checks still fail after 3 attempts" in esc  # the file's suggested next step
    assert server.get("/runs/no-such-run")[0] == 404


def test_forged_posts_are_refused(web: tuple[Web, list]) -> None:
    server, records = web
    run_id = records[1].id
    path = f"/escalations/{run_id}/resolve"
    good = {"csrf": server.csrf(), "note": "forged"}
    assert server.post(path, {**good, "csrf": "0" * 64})[0] == 403
    assert server.post(path, {"note": "no csrf"})[0] == 403
    assert server.post(path, good, Origin="http://evil.example")[0] == 403
    assert server.post(path, good, Origin="")[0] == 403  # neither Origin nor Referer
    status, _, _ = server.request("POST", path, good, Origin=server.origin)  # no cookie
    assert status == 401
    assert not [e for e in events(server.home) if e.get("type") == "escalation_resolved"]


def test_resolve_and_pause_are_recorded_by_web(web: tuple[Web, list]) -> None:
    server, records = web
    run_id = records[1].id
    status, response, text = server.request(
        "POST",
        f"/escalations/{run_id}/resolve",
        {"csrf": server.csrf(), "note": "fixed the fixture"},
        Cookie=server.cookie,
        Origin=server.origin,
    )
    assert status == 303, text
    back = response.getheader("location")
    assert back.startswith("../../escalations?said=")
    # The page shows what the command said, by the key; a made-up key shows nothing.
    assert f"resolved {run_id}" in server.get("/escalations?" + back.split("?")[1])[1]
    assert "run this" not in server.get("/escalations?said=run+this")[1]
    resolved = [e for e in events(server.home) if e.get("type") == "escalation_resolved"]
    assert [(e["run"], e["by"], e["note"]) for e in resolved] == [
        (run_id, "web", "fixed the fixture")
    ]
    listed = json.loads(loopd(server.home, "escalations", "list", "--json").stdout)
    assert run_id not in [e["run"] for e in listed]
    retried = records[2].id
    form = {"csrf": server.csrf(), "note": "use the staging key", "retry": "yes"}
    assert server.post(f"/escalations/{retried}/resolve", form)[0] == 303
    last = [e for e in events(server.home) if e.get("type") == "escalation_resolved"][-1]
    assert (last["run"], last["by"], last["retry"]) == (retried, "web", True)
    assert (server.home / "state" / "inbox" / last["trigger"]).is_file()  # the retry, queued
    assert server.post("/loops/toolz/pause", {"csrf": server.csrf()})[0] == 303
    paused = [e for e in events(server.home) if e.get("type") == "loop_paused"]
    assert [(e["loop"], e["by"]) for e in paused] == [("toolz", "web")]
    status_json = json.loads(loopd(server.home, "status", "--json").stdout)
    assert status_json["loops"]["toolz"]["paused"] is True
    assert server.post("/loops/toolz/resume", {"csrf": server.csrf()})[0] == 303
    assert [e["by"] for e in events(server.home) if e.get("type") == "loop_resumed"] == ["web"]


def test_trigger_queues_a_run_naming_the_console(web: tuple[Web, list]) -> None:
    server, _ = web
    inbox = server.home / "state" / "inbox"
    before = set(inbox.iterdir()) if inbox.exists() else set()
    status, text = server.post("/loops/toolz/trigger", {"csrf": server.csrf()})
    assert status == 303, text
    queued = [p for p in inbox.iterdir() if p not in before]
    assert len(queued) == 1 and "triggered from the console (web)" in queued[0].read_text()
    assert server.post("/loops/nosuch/trigger", {"csrf": server.csrf()})[0] == 400


def test_read_only_refuses_every_post(tmp_path: Path) -> None:
    home, records = _home(tmp_path)
    server = Web(home, "--read-only")
    try:
        server.login()
        _, page = server.get("/escalations")
        assert "read-only" in page and '<form method="post"' not in page
        csrf = csrf_value(server.token())  # the right one: read-only refuses even that
        for path in (f"/escalations/{records[1].id}/resolve", "/loops/toolz/pause"):
            assert server.post(path, {"csrf": csrf, "note": "x"})[0] == 403
        assert not [
            e for e in events(home) if e.get("type") in ("escalation_resolved", "loop_paused")
        ]
    finally:
        server.stop()


def _browser(tmp_path: Path, width: int, height: int = 900) -> list[str]:
    """Headless Chromium's command line, every name but 127.0.0.1 resolving to nothing."""
    try:
        binary = chromium.binary()
    except chromium.ChromiumUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"headless Chromium must run in CI: {exc}")
        pytest.skip(str(exc))
    # Not tests/chromium.run: its network namespace and resolver rule keep it from 127.0.0.1.
    # Here every name but 127.0.0.1 still resolves to nothing: the page fetches nothing else.
    flags = [f for f in chromium.FLAGS if not f.startswith("--host-resolver-rules")]
    flags.append("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1")
    profile = tempfile.mkdtemp(prefix="profile-", dir=tmp_path)
    return [binary, *flags, f"--user-data-dir={profile}", f"--window-size={width},{height}"]


def _dom(base: list[str], url: str) -> str:
    proc = subprocess.run([*base, "--dump-dom", url], capture_output=True, timeout=180)
    page = proc.stdout.decode("utf-8", "replace")
    assert "<html" in page, proc.stderr.decode()[-2000:]
    return page


def _screenshot(base: list[str], url: str, png: Path) -> Path:
    shot = subprocess.run([*base, f"--screenshot={png}", url], capture_output=True, timeout=180)
    assert png.exists(), shot.stderr.decode()[-2000:]
    return png


def test_a_page_in_chromium_at_390_px(web: tuple[Web, list], tmp_path: Path) -> None:
    server, records = web
    url = f"{server.origin}/login?token={server.token()}"
    base = _browser(tmp_path, 390)
    page = _dom(base, url)
    assert "toolz" in page and "Loops" in page
    assert "<script" not in page  # nothing on it needs JavaScript
    png = _screenshot(base, url, tmp_path / "phone.png")
    width, _height, rows = chromium.png_pixels(png)
    assert width == 390
    assert len({bytes(r) for r in rows}) > 20  # a drawn page, not one blank colour


def test_without_the_extra_it_names_the_install(tmp_path: Path) -> None:
    shim = tmp_path / "shim" / "starlette"
    shim.mkdir(parents=True)
    # First on the path, it fails as a missing package does.
    (shim / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'starlette'\", name='starlette')\n"
    )
    home = tmp_path / "home"
    home.mkdir()
    proc = loopd(home, "web", env={"PYTHONPATH": str(shim.parent)})
    assert proc.returncode == 2
    assert "needs the [web] extra" in proc.stderr and "[web]" in proc.stderr.split("Fix:")[1]
    assert not (home / "state" / "web-token").exists()  # nothing made for a console not started


def test_promote_and_retire_a_rule(web: tuple[Web, list]) -> None:
    server, _ = web
    _, page = server.get("/rules")
    assert "r-0001-trial-one" in page and "r-0002-old" in page
    assert server.post("/rules/r-0001-trial-one/promote", {"csrf": server.csrf()})[0] == 303
    assert server.post("/rules/r-0002-old/retire", {"csrf": server.csrf()})[0] == 303
    listed = {r["id"]: r["status"] for r in json.loads(server.get("/api/rules")[1])}
    assert listed == {"r-0001-trial-one": "active", "r-0002-old": "retired"}
    moves = [e for e in events(server.home) if e.get("rule") and "(web)" in e.get("reason", "")]
    assert sorted((e["rule"], e["to"]) for e in moves) == [
        ("r-0001-trial-one", "active"),
        ("r-0002-old", "retired"),
    ]
    assert server.post("/rules/r-0002-old/delete", {"csrf": server.csrf()})[0] == 404


def test_the_run_page_draws_its_diff_coloured_redacted_and_capped(web: tuple[Web, list]) -> None:
    from daemon.web.pages import DIFF_LINES

    server, records = web
    run_id = records[0].id
    patch = server.home / "state" / "runs" / run_id / "attempt-1" / "diff.patch"
    patch.parent.mkdir(parents=True, exist_ok=True)
    head = [
        "diff --git a/app.py b/app.py",
        "--- a/app.py",
        "+++ b/app.py",
        "@@ -1,2 +1,2 @@",
        " import os",
        "-TOKEN = None",
        f'+TOKEN = "{GITHUB_TOKEN}"  # <script>alert(1)</script>',
    ]
    patch.write_text("\n".join(head) + "\n")
    status, page = server.get(f"/runs/{run_id}")
    assert status == 200, page
    printed = loopd(server.home, "show", run_id, "--diff").stdout  # what the page draws
    assert "-TOKEN = None" in printed
    assert '<span class="hunk">@@ -1,2 +1,2 @@</span>' in page
    assert '<span class="del">-TOKEN = None</span>' in page
    assert '<span class="file">+++ b/app.py</span>' in page
    added = page.split('<span class="add">', 1)[1].split("</span>", 1)[0]
    assert added.startswith("+TOKEN = ") and "REDACTED" in added
    assert GITHUB_TOKEN not in page and "&lt;script&gt;alert(1)" in page and "<script>" not in page
    assert "<script" not in page  # colour by the stylesheet's classes, no JavaScript
    # A diff of more lines than are drawn: the first ones, and a note of how many more.
    extra = DIFF_LINES + 250
    patch.write_text("\n".join(head + [f"+line {i}" for i in range(extra)]) + "\n")
    _, page = server.get(f"/runs/{run_id}")
    total = len(loopd(server.home, "show", run_id, "--diff").stdout.splitlines())
    # Drawn: show's header line, the 7 lines of `head` (one an addition), then additions.
    assert page.count('<span class="add">') == DIFF_LINES - 1 - len(head) + 1
    assert f"{total - DIFF_LINES} more line(s) not shown here" in page


def test_runs_of_a_night_in_the_homes_zone(tmp_path: Path) -> None:
    """A night is noon to noon in `[limits] timezone`, as `loopd report` counts it: at 02:00
    and 04:00 UTC, both the night of the 11th in UTC, are 11:00 and 13:00 in Tokyo."""
    night_runs = [
        RunSpec(night=1, hour=2, loop="toolz", outcome="succeeded"),
        RunSpec(night=1, hour=4, loop="toolz", outcome="escalated", cause="checks-failed"),
        RunSpec(night=3, hour=23, loop="toolz", outcome="succeeded"),
    ]
    home, _repo, records = build_week(tmp_path, NOW, night_runs, [])
    config = home / "loopd.toml"
    config.write_text(
        config.read_text().replace("[limits]\n", '[limits]\ntimezone = "Asia/Tokyo"\n')
    )
    server = Web(home)
    try:
        server.login()
        for night, expected in (
            ("2026-03-11", [records[0].id]),
            ("2026-03-12", [records[1].id]),
            ("2026-03-09", [records[2].id]),
            ("2026-03-10", []),
        ):
            listed = loopd(home, "runs", "--night", night, "--json", "--limit", "200")
            assert listed.returncode == 0, listed.stderr
            assert [r["run"] for r in json.loads(listed.stdout)] == expected, night
            status, page = server.get(f"/runs?night={night}")
            assert status == 200, page
            shown = [r.id for r in records if f">{r.id}</a>" in page]
            assert shown == expected, night
        _, page = server.get("/runs?night=2026-03-11&loop=toolz&outcome=escalated")
        assert records[0].id not in page and "No runs." in page
        assert server.get("/runs?night=yesterday")[0] == 400  # the command's usage error
        assert "write a date" in server.get("/runs?night=yesterday")[1]
    finally:
        server.stop()


def test_the_weeks_charts_are_loopd_report_html(web: tuple[Web, list], tmp_path: Path) -> None:
    """`/report` is the page `loopd report --html` writes, its charts drawn in Chromium by the
    plotly bundle the console serves beside it (nothing fetched from elsewhere)."""
    from plotly.offline import get_plotlyjs

    server, _ = web
    status, response, page = server.request("GET", "/report", Cookie=server.cookie)
    assert status == 200, page
    csp = response.getheader("content-security-policy")
    assert "'sha256-" in csp and "frame-ancestors 'none'" in csp and "http" not in csp
    assert "back to the console" in page and GITHUB_TOKEN not in page
    written = tmp_path / "week.html"
    proc = loopd(server.home, "report", "--html", str(written))
    assert proc.returncode == 0, proc.stderr
    # The same sections as the command's page (their times differ by the moment each ran).
    assert page.count("<h2") == written.read_text().count("<h2") > 0
    [name] = re.findall(r'<script src="([^"]+)"', page)
    status, text = server.get(f"/{name}")
    assert status == 200 and text == get_plotlyjs()
    assert server.request("GET", f"/{name}")[0] == 401  # no cookie, no file
    assert server.get("/other.min.js")[0] == 404
    dom = _dom(
        _browser(tmp_path, 1200), f"{server.origin}/login?token={server.token()}&next=report"
    )
    assert 'id="no-library"' not in dom  # plotly loaded: its inline script removed the warning
    assert chromium.count_marks(dom).hits  # and drew the charts' marks
