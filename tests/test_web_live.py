"""The console's run page (#37): a running attempt's transcript followed live by server-sent
events, and the run's two actions, cancel and land, each recorded with `by = "web"`.

Real parts: `loopd once` runs a real (sandboxed) agent on a real git repository, `loopd web` is
a real process on 127.0.0.1, and Debian's Chromium is driven by Playwright (launched with the
installed browser's executable, nothing downloaded): it follows the log as the agent writes it,
lands a run and sees it on the target branch, and cancels a running run.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.web.security import csrf_value
from tests import chromium
from tests.helpers import (
    ROOT,
    events,
    git,
    loopd,
    make_home,
    make_repo,
    runs,
    start_daemon,
    stop_daemon,
    talk,
    wait_for,
)
from tests.orphans import die_with_parent
from tests.test_daemon import BUGGY, loop_text
from tests.test_web_console import Web

SECRET = "ghp_" + "Lw3XkP2mW9rT4vB8nL3cY6dH1sF5gJ0aE2uQ"
WAIT = 120  # seconds any one condition may take on a loaded machine
LONG = 2100  # lines: more than the run page shows as loaded (livelog.LOADED_LINES)


def slow_agent(shared: Path, name: str, filler: int = 0) -> str:
    """The agent's script: a line, then (once the test has opened the page and opened the
    gate) the fix and a few more lines over a second or two, a token among them; `filler`
    lines first when asked for."""
    return (
        "import pathlib, sys, time\n"
        f"shared = pathlib.Path({str(shared)!r})\n"
        f"print('\\n'.join(f'filler {{n}}' for n in range({filler})), flush=True)\n"
        "print('live line one: looking at calc.py', flush=True)\n"
        f"(shared / {name + '-started'!r}).write_text('x')\n"
        "while not (shared / 'gate').exists():\n"
        "    time.sleep(0.05)\n"
        "p = pathlib.Path('calc.py')\n"
        "p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
        "for n in ('two', 'three', 'four'):\n"
        "    time.sleep(0.5)\n"
        "    print(f'live line {n}: fixed add', flush=True)\n"
        f"print('pushing with {SECRET}', flush=True)\n"
        "print('live line last', flush=True)\n"
    )


def stuck_agent(shared: Path) -> str:
    """An agent that says one line and then waits until it is stopped."""
    return (
        "import pathlib, time\n"
        "print('stuck line: waiting to be cancelled', flush=True)\n"
        f"pathlib.Path({str(shared / 'stuck-started')!r}).write_text('x')\n"
        "while True:\n"
        "    time.sleep(0.2)\n"
    )


def _home(tmp: Path, script: str) -> tuple[Path, Path, Path]:
    repo = make_repo(tmp / "repo", BUGGY)
    shared, sandbox = talk(tmp)
    config = (
        '[agents.fixer]\nadapter = "command"\n'
        f"command = {json.dumps([sys.executable, '-c', script])}\n"
        + sandbox
        + f'[limits]\nworktrees = "{tmp / "wt"}"\n'
    )
    # `branch`: a succeeded run waits for a person to land it.
    loop = loop_text(repo, max_attempts=1, critic="off", land="branch")
    home = make_home(tmp / "home", config, {"calc": loop})
    return home, repo, shared


def _once(home: Path) -> tuple[subprocess.Popen[str], str]:
    """`loopd once calc` in the background, and its RUN_ID (its first line)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli.main", "--home", str(home), "once", "calc"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
        text=True,
        preexec_fn=die_with_parent,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


@pytest.fixture
def browser() -> Iterator[Any]:
    """Debian's Chromium under Playwright: the installed executable, no browser downloaded."""
    try:
        binary = chromium.binary()
        from playwright.sync_api import sync_playwright
    except (chromium.ChromiumUnavailable, ImportError) as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Chromium under Playwright must run in CI: {exc}")
        pytest.skip(str(exc))
    with sync_playwright() as playwright:
        # Every name but 127.0.0.1 resolves to nothing: the pages fetch nothing from elsewhere.
        flags = ["--no-sandbox", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]
        launched = playwright.chromium.launch(executable_path=binary, args=flags)
        try:
            yield launched
        finally:
            launched.close()


def _page(browser: Any, server: Web, path: str, script: bool = True) -> Any:
    """A logged-in page of the console at `path`, 390 pixels wide (a phone)."""
    page = browser.new_page(viewport={"width": 390, "height": 844}, java_script_enabled=script)
    page.set_default_timeout(WAIT * 1000)
    page.goto(f"{server.origin}/login?token={server.token()}")
    page.goto(f"{server.origin}{path}")
    return page


def _log(page: Any) -> str:
    return str(page.text_content("#log") or "")


def test_follow_the_live_log_then_land_the_run_from_the_page(tmp_path: Path, browser: Any) -> None:
    home, repo, shared = _home(tmp_path, slow_agent(tmp_path / "talk", "slow"))
    server = Web(home)
    proc, run_id = _once(home)
    try:
        wait_for((shared / "slow-started").exists, timeout=WAIT, what="the agent to start")
        page = _page(browser, server, f"/runs/{run_id}")
        assert page.get_attribute("#live-state", "data-live") == f"../runs/{run_id}/live"
        page.locator("#log", has_text="live line one").wait_for()
        assert "live line two" not in _log(page)
        # With JavaScript off: the transcript as it was when the page was loaded.
        still = _page(browser, server, f"/runs/{run_id}", script=False)
        assert "live line one" in _log(still) and "live line two" not in _log(still)
        assert "as it was when this page was loaded" in (still.text_content("#live-state") or "")
        (shared / "gate").write_text("go")
        # Pushed as the agent writes them, into the page as it was loaded: no reload.
        page.locator("#log", has_text="live line two").wait_for()
        page.wait_for_selector("#live-state[data-ended='yes']")
        assert page.text_content("#live-state") == "run ended: succeeded"
        log = _log(page)
        for n in ("one", "two", "three", "four", "last"):
            assert f"live line {n}" in log, log
        assert SECRET not in log and "pushing with" in log  # redacted as every page is
        said = re.findall(r"^[\d:]+ (live line \w+)", log, re.M)
        # Each once: the stream's lines replaced those the page was loaded with.
        assert said == [f"live line {n}" for n in ("one", "two", "three", "four", "last")], log
        # The same lines `loopd logs RUN` prints, less what redaction took.
        printed = loopd(home, "logs", run_id, timeout=WAIT).stdout
        assert [line for line in printed.splitlines() if "live line" in line] == [
            line for line in log.splitlines() if "live line" in line
        ]
        assert proc.wait(timeout=WAIT) == 0, proc.stderr.read() if proc.stderr else ""
        assert git(repo, "show", "main:calc.py") == BUGGY["calc.py"].rstrip("\n")  # not yet

        page.reload()
        assert page.query_selector("#live-state") is None  # an ended run is not followed
        assert "live line last" in _log(page)  # with or without JavaScript: the whole log
        page.click("text=land (setup and checks run again)")
        page.wait_for_selector("pre.said")
        assert page.url.split("?")[0] == f"{server.origin}/runs/{run_id}"
        assert "landed" in (page.text_content("pre.said") or "")
        assert "a + b" in git(repo, "show", "main:calc.py")  # on the target branch
        (run,) = runs(home)
        assert run["landed"], run
        asked = [e for e in events(home) if e["type"] == "land_requested"]
        assert [(e["run"], e["by"], e["target"]) for e in asked] == [(run_id, "web", "main")]
        assert [e["run"] for e in events(home) if e["type"] == "landed"] == [run_id]
        page.reload()
        assert page.query_selector("text=land (setup and checks run again)") is None
    finally:
        (shared / "gate").write_text("go")
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.stop()


def test_cancel_a_running_run_from_the_page(tmp_path: Path, browser: Any) -> None:
    home, _repo, shared = _home(tmp_path, stuck_agent(tmp_path / "talk"))
    server = Web(home)
    proc, run_id = _once(home)
    try:
        wait_for((shared / "stuck-started").exists, timeout=WAIT, what="the agent to start")
        page = _page(browser, server, f"/runs/{run_id}")
        page.locator("#log", has_text="stuck line").wait_for()
        follower = _page(browser, server, f"/runs/{run_id}")  # a second tab, following live
        follower.locator("#live-state", has_text="following live").wait_for()
        page.click("text=cancel this run")
        page.wait_for_selector("pre.said")
        # The other tab's stream ends with the run: it says how, and stops following.
        follower.wait_for_selector("#live-state[data-ended='yes']")
        assert follower.text_content("#live-state") == "run ended: cancelled"
        assert "stuck line" in _log(follower)
        code = proc.wait(timeout=WAIT)
        assert code == 1, (code, proc.stdout.read() if proc.stdout else "")
        (run,) = runs(home)
        assert run["outcome"] == "cancelled", run
        asked = [e for e in events(home) if e["type"] == "cancel_requested"]
        assert [(e["run"], e["by"], e["loop"]) for e in asked] == [(run_id, "web", "calc")]
        # The run ended: the page that follows it says so and stops following.
        page.reload()
        assert page.query_selector("text=cancel this run") is None
        assert page.query_selector("#live-state") is None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.stop()


def test_the_stream_ends_with_the_run_and_needs_the_cookie(tmp_path: Path) -> None:
    """Plain HTTP: 401 without the cookie; with it, the event stream of an ended run is its
    whole transcript and then an `end` event, and the connection closes."""
    home, _repo, shared = _home(tmp_path, slow_agent(tmp_path / "talk", "plain", LONG))
    (shared / "gate").write_text("go")
    once = loopd(home, "once", "calc", timeout=WAIT * 2)
    assert once.returncode == 0, once.stdout + once.stderr
    run_id = once.stdout.splitlines()[0]
    server = Web(home)
    try:
        assert server.request("GET", f"/runs/{run_id}/live")[0] == 401
        forged = server.request("GET", f"/runs/{run_id}/live", Cookie="loopd_console=forged")
        assert forged[0] == 401
        server.login()
        status, response, text = server.request("GET", f"/runs/{run_id}/live", Cookie=server.cookie)
        assert status == 200 and response.getheader("content-type", "").startswith(
            "text/event-stream"
        )
        said = [m.group(1) for m in re.finditer(r"^data: [\d:]+ (live line \w+)", text, re.M)]
        assert said == [f"live line {n}" for n in ("one", "two", "three", "four", "last")], text
        assert text.rstrip("\n").endswith("event: end\ndata: run ended: succeeded")
        assert SECRET not in text
        for n in (0, LONG - 1):  # the whole transcript
            assert re.search(rf"^data: [\d:]+ filler {n}$", text, re.M), n
        # The page as loaded shows the last lines, and says where the rest are.
        _, page = server.get(f"/runs/{run_id}")
        assert "live line last" in page and re.search(rf"^[\d:]+ filler {LONG - 1}$", page, re.M)
        assert not re.search(r"^[\d:]+ filler 0$", page, re.M)
        assert f"`loopd logs {run_id}` prints them all" in page
    finally:
        server.stop()


def test_a_stopping_console_ends_its_live_streams(tmp_path: Path) -> None:
    """A stream follows a run that never ends by itself; the console still stops when told
    (the stream closes without `end`, so the page follows again once the console is back),
    and an unknown run's stream ends at once with the command's words."""
    home, _repo, shared = _home(tmp_path, stuck_agent(tmp_path / "talk"))
    server = Web(home)
    proc, run_id = _once(home)
    try:
        wait_for((shared / "stuck-started").exists, timeout=WAIT, what="the agent to start")
        server.login()
        _, _, unknown = server.request(
            "GET", "/runs/20990101T000000Z-calc-ffff/live", Cookie=server.cookie
        )
        assert "event: end\ndata: loopd: unknown run" in unknown
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT)
        conn.request("GET", f"/runs/{run_id}/live", headers={"Cookie": server.cookie})
        response = conn.getresponse()
        assert response.status == 200
        while b"stuck line" not in (line := response.readline()):
            assert line, "the stream closed before the agent's line"
        server.stop()  # SIGTERM: it waits for open requests, so this one must end
        rest = response.read()
        conn.close()
        assert b"event: end" not in rest and proc.poll() is None  # the run goes on
    finally:
        assert loopd(home, "cancel", run_id).returncode == 0
        proc.wait(timeout=WAIT)


def test_land_and_cancel_refuse_a_forged_csrf_token_and_read_only(tmp_path: Path) -> None:
    home, repo, shared = _home(tmp_path, slow_agent(tmp_path / "talk", "forged"))
    (shared / "gate").write_text("go")
    once = loopd(home, "once", "calc", timeout=WAIT * 2)
    assert once.returncode == 0, once.stdout + once.stderr
    run_id = once.stdout.splitlines()[0]
    server = Web(home)
    try:
        server.login()
        for action in ("land", "cancel"):
            path = f"/runs/{run_id}/{action}"
            assert server.post(path, {"csrf": "0" * 64})[0] == 403
            assert server.post(path, {})[0] == 403
            assert (
                server.post(path, {"csrf": server.csrf()}, Origin="http://evil.example")[0] == 403
            )
            assert server.request("POST", path, {"csrf": server.csrf()})[0] == 401
        assert git(repo, "show", "main:calc.py") == BUGGY["calc.py"].rstrip("\n")
        assert not [e for e in events(home) if e["type"] in ("land_requested", "cancel_requested")]
    finally:
        server.stop()
    read_only = Web(home, "--read-only")
    try:
        read_only.login()
        _, page = read_only.get(f"/runs/{run_id}")
        assert "land (setup" not in page and "live line last" in page
        csrf = csrf_value(read_only.token())  # the right one: read-only refuses even that
        for action in ("land", "cancel"):
            assert read_only.post(f"/runs/{run_id}/{action}", {"csrf": csrf})[0] == 403
        assert not [e for e in events(home) if e["type"] in ("land_requested", "cancel_requested")]
    finally:
        read_only.stop()


def answered_agent(shared: Path) -> str:
    """An agent that cannot fix calc.py until a person has answered (a file the test writes
    once the first run escalated): the first run escalates, the retry succeeds."""
    return (
        "import pathlib\n"
        f"if pathlib.Path({str(shared / 'answered')!r}).exists():\n"
        "    p = pathlib.Path('calc.py')\n"
        "    p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
        "    print('fixed add, with the answer', flush=True)\n"
        "else:\n"
        "    print('which sign should add use? I need a person', flush=True)\n"
    )


def test_resolve_with_a_retry_in_the_browser_and_see_the_retrys_run(
    tmp_path: Path, browser: Any
) -> None:
    home, _repo, shared = _home(tmp_path, answered_agent(tmp_path / "talk"))
    proc, first = _once(home)  # the night: a real run that escalates
    proc.wait(timeout=WAIT)
    (run,) = runs(home)
    assert (run["id"], run["outcome"]) == (first, "escalated"), run
    (shared / "answered").write_text("yes")
    daemon = start_daemon(home)  # takes the retry the page queues
    server = Web(home)
    try:
        page = _page(browser, server, "/runs")
        assert first in _text(page) and "escalated" in _text(page)
        # Refused in the browser: no login (401), and a form whose CSRF token was forged.
        stranger = browser.new_page()
        assert stranger.goto(f"{server.origin}/escalations").status == 401
        stranger.close()
        page = _page(browser, server, "/escalations")
        page.eval_on_selector("form.resolve input[name=csrf]", "e => e.value = 'forged'")
        with page.expect_response(lambda r: r.request.method == "POST") as answer:
            page.click("form.resolve button")
        assert answer.value.status == 403
        assert not [e for e in events(home) if e["type"] == "escalation_resolved"]
        page = _page(browser, server, "/escalations")
        page.fill("textarea[name=note]", "add means a + b")
        page.check("input[name=retry]")
        page.click("form.resolve button")
        page.wait_for_selector("pre.said")
        resolved = [e for e in events(home) if e["type"] == "escalation_resolved"]
        assert [(e["run"], e["by"], e["retry"]) for e in resolved] == [(first, "web", True)]

        def retried() -> bool:
            return any(r["id"] != first and r.get("outcome") for r in runs(home))

        wait_for(retried, timeout=WAIT, what="the retry's run to end")
        (retry,) = [r for r in runs(home) if r["id"] != first]
        assert retry["outcome"] == "succeeded", retry
        # The retry's run on the console's pages, as a person would follow it.
        page = _page(browser, server, "/runs")
        assert retry["id"] in _text(page)
        page.click(f"text={retry['id']}")
        page.wait_for_url(f"**/runs/{retry['id']}")
        shown = _text(page)
        assert "succeeded" in shown and "fixed add, with the answer" in _log(page)
    finally:
        stop_daemon(daemon)
        server.stop()


def _text(page: Any) -> str:
    return str(page.text_content("body") or "")
