"""`loopd report --html FILE`, rendered for real in headless Chromium: each chart draws the
marks the state holds, the page paints, opens with no network, and shows agent text as text.

Where Chromium cannot run the test is skipped, except with CI=true, where it fails.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.chromium import (
    ChromiumUnavailable,
    colour_summary,
    count_marks,
    dump_dom,
    page_console_errors,
    screenshot,
)
from tests.helpers import ROOT, loopd
from tests.report_week import HOSTILE, RuleSpec, RunSpec, build_week

# The page is rendered once, in headless Chromium, for the module: its tests stay on one worker
# under pytest-xdist (--dist loadgroup), so Chromium starts once.
pytestmark = pytest.mark.xdist_group("report-html")

RUNS = [
    RunSpec(night=6, hour=23, loop="app", outcome="succeeded", attempts=1, tokens=1000, cost=0.5),
    RunSpec(
        night=6, hour=2, loop="app", outcome="escalated", attempts=3, tokens=3000, reason=HOSTILE
    ),
    RunSpec(night=5, hour=1, loop="docs", outcome="succeeded", attempts=2, tokens=2000),
    RunSpec(night=5, hour=3, loop="docs", outcome="succeeded", attempts=2, tokens=500, cost=0.25),
    RunSpec(night=4, hour=22, loop="app", outcome="succeeded", attempts=1, landed=True),
    RunSpec(night=3, hour=4, loop="app", outcome="succeeded", attempts=1, branch_kept=False),
    RunSpec(night=3, hour=5, loop="docs", outcome="error", attempts=1, tokens=100),
    RunSpec(night=2, hour=23, loop="docs", outcome="interrupted", attempts=1),
    RunSpec(night=1, hour=1, loop="app", outcome="succeeded", attempts=3, tokens=9000, cost=1.5),
]
RULES = [
    RuleSpec("r-0001-alpha", "active", 30),
    RuleSpec(
        "r-0002-beta",
        "active",
        6,
        [(6, "rule_accepted", "", "trial"), (3, "rule_promoted", "trial", "active")],
        kind="decision",
    ),
    RuleSpec("r-0003-gamma", "trial", 2, [(2, "rule_accepted", "", "trial")], kind="knowledge"),
    RuleSpec(
        "r-0004-delta",
        "retired",
        5,
        [(5, "rule_accepted", "", "trial"), (1, "rule_demoted", "trial", "retired")],
        kind="skill",
    ),
    RuleSpec("r-0005-epsilon", "rejected", 4, [(4, "rule_rejected", "", "rejected")]),
]
# The table of rules by kind: trial, active, retired, rejected now; learned, promoted and
# demoted in the report's window.
KINDS = {
    "failure": [0, 1, 0, 1, 0, 0, 0],
    "decision": [0, 1, 0, 0, 1, 1, 0],
    "knowledge": [1, 0, 0, 0, 1, 0, 0],
    "skill": [0, 0, 1, 0, 1, 0, 1],
}
NIGHTS = 8  # a 7-day window reaches into eight noon-to-noon nights


def _expected() -> dict[tuple[str, str], int]:
    def night(r: RunSpec) -> int:
        return r.night

    succeeded = [r for r in RUNS if r.outcome == "succeeded"]
    return {
        ("runs", "bar"): len({(night(r), r.loop, r.outcome) for r in RUNS}),
        ("tokens", "bar"): len({night(r) for r in RUNS if r.tokens}),
        ("tokens", "point"): len({night(r) for r in RUNS if r.cost}),
        ("tokens", "line"): 1,
        ("attempts", "bar"): len({(r.loop, r.attempts) for r in succeeded}),
        ("rules", "fill"): 4,  # trial, active, retired and rejected each hold a rule some night
        ("rules", "line"): 4,
        ("rules", "point"): 4 * NIGHTS,
    }


class _Tags(HTMLParser):
    """Tags and attributes of a page, and the text of its <title> and table cells."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self._in: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self._in:
            while self._in and self._in.pop() != tag:
                pass

    def handle_data(self, data: str) -> None:
        if self._in and self._in[-1] in ("td", "title", "a", "code", "p", "h1", "h2"):
            self.text.append(data)


def _parse(page: str) -> _Tags:
    parser = _Tags()
    parser.feed(page)
    return parser


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("week")
    now = datetime.now(UTC)
    home, repo, records = build_week(tmp, now, RUNS, RULES)
    page = tmp / "report.html"
    proc = loopd(home, "report", "--html", str(page), env={"TZ": "UTC"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    try:
        dom, stderr = dump_dom(page)
        shot = screenshot(page, tmp / "report.png", size=(1000, 2200))
    except ChromiumUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"headless Chromium must run in CI: {exc}")
        pytest.skip(f"headless Chromium cannot run here: {exc}")
    return {
        "home": home,
        "page": page,
        "html": page.read_text(),
        "dom": dom,
        "stderr": stderr,
        "shot": shot,
        "out": proc.stdout,
        "records": records,
    }


def test_each_chart_draws_the_marks_the_state_holds(rendered: dict) -> None:
    counts = count_marks(rendered["dom"]).hits
    for key, expected in _expected().items():
        assert counts.get(key, 0) == expected, (key, counts)
    assert page_console_errors(rendered["stderr"], rendered["page"]) == []


def test_the_screenshot_is_painted(rendered: dict) -> None:
    colours, painted = colour_summary(rendered["shot"])
    assert colours > 50, colours  # bars, areas, text: many colours
    assert painted > 0.05, painted  # not a blank white page


def test_the_tables_list_open_escalations_with_links_and_branches_ready_to_land(
    rendered: dict,
) -> None:
    dom = _parse(rendered["dom"])
    records = {r.id: r for r in rendered["records"]}
    escalated = [r for r in rendered["records"] if r.outcome in ("escalated", "error")]
    links = [a["href"] for tag, a in dom.tags if tag == "a" and a.get("href")]
    state = rendered["home"] / "state" / "escalations"
    to_files = [link for link in links if link.endswith(".md")]
    assert sorted(to_files) == sorted((state / f"{r.id}.md").as_uri() for r in escalated)
    # The ready table: from its heading to the end of its table.
    ready_html = rendered["dom"].split("<h2>Branches ready to land</h2>", 1)[1]
    text = " ".join(_parse(ready_html.split("</table>", 1)[0]).text)
    ready = [
        r
        for spec, r in zip(RUNS, rendered["records"], strict=True)
        if spec.outcome == "succeeded" and spec.branch_kept and not spec.landed
    ]
    for run in ready:
        assert run.branch in text
    for spec, run in zip(RUNS, rendered["records"], strict=True):
        if spec.landed or (spec.outcome == "succeeded" and not spec.branch_kept):
            assert run.branch not in text, run.id  # landed, or its branch is gone
    assert (
        f"{len(escalated)} open escalation(s), {len(ready)} branch(es) ready to land"
        in (rendered["out"])
    )
    assert records


def test_the_rules_table_keeps_the_four_kinds_apart(rendered: dict) -> None:
    [table] = re.findall(r'<table id="kinds">(.*?)</table>', rendered["dom"], re.DOTALL)
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.DOTALL)
    heads = re.findall(r"<th>(.*?)</th>", rows[0])
    assert heads[:5] == ["kind", "trial", "active", "retired", "rejected"]
    cells = {
        found[0]: [int(c) for c in found[1:]]
        for found in (re.findall(r"<td>(.*?)</td>", row) for row in rows[1:])
    }
    assert cells == KINDS


def test_agent_text_is_escaped_and_the_page_needs_no_network(rendered: dict) -> None:
    html_text, dom = rendered["html"], _parse(rendered["dom"])
    # The hostile reason is shown as text: no element, no script, the title unchanged.
    assert not [t for t, _ in dom.tags if t == "img"]
    assert "<title>loopd report</title>" in rendered["dom"]
    assert HOSTILE in " ".join(dom.text)
    static = _parse(html_text)
    scripts = [a for t, a in static.tags if t == "script"]
    assert len([t for t, _ in dom.tags if t == "script"]) == len(scripts)
    # No script, style or image from anywhere but plotly's bundle beside the page (by its
    # relative name); no connection allowed.
    assert [a.get("src") for a in scripts if a.get("src")] == [
        p.name for p in rendered["page"].parent.glob("plotly-*.min.js")
    ]
    assert not [t for t, _ in static.tags if t in ("link", "iframe", "object", "embed", "base")]
    (csp,) = [
        a["content"] for t, a in static.tags if a.get("http-equiv") == "Content-Security-Policy"
    ]
    assert "connect-src 'none'" in csp and "default-src 'none'" in csp
    script_src = csp.split("script-src")[1].split(";")[0]
    assert "unsafe-eval" not in csp and "'unsafe-inline'" not in script_src
    assert "'self'" in script_src and "http" not in script_src
    assert re.findall(r"'sha256-[A-Za-z0-9+/=]+'", csp)
    # plotly's bundle is not inlined: the page weighs what its data weighs.
    assert "plotly.js v" not in html_text
    assert len(html_text) < 1_000_000


def test_status_and_the_text_report_never_import_plotly(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from daemon.cli.main import main\n"
        f"for args in (['status'], ['report'], ['runs']):\n"
        f"    main(['--home', {str(tmp_path)!r}, *args])\n"
        "assert 'plotly' not in sys.modules, 'plotly imported'\n"
    )
    (tmp_path / "loops").mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
