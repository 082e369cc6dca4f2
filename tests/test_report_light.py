"""`loopd report --html` for a night of a first week (#42.8), rendered in headless Chromium:
the page is light (plotly's bundle is one file beside it, shared), its charts of nights all
cover the window's nights, an empty chart is one line, and it lists the runs with a link each.

Before the fix, for the 5 runs below: a 4,849,829-byte page (plotly inlined), the runs chart
over the one night with runs while the empty tokens chart showed seven other nights and an
empty chart a -1..4 axis, and no list of the runs.

Where Chromium cannot run the test is skipped, except with CI=true, where it fails.
"""

from __future__ import annotations

import os
import re
import shutil
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path

import pytest
from plotly.offline import get_plotlyjs

from daemon.people.report_nights import LISTED_MAX, night_of
from daemon.redact import redact
from tests.chromium import ChromiumUnavailable, count_marks, dump_dom, page_console_errors
from tests.helpers import loopd
from tests.report_week import RunSpec, build_week, realistic_week

pytestmark = pytest.mark.xdist_group("report-html")

LIGHT = 1_000_000  # bytes: a night's page, without the shared bundle
GITHUB_TOKEN = "ghp_" + "Zq7XkP2mW9rT4vB8nL3cY6dH1sF5gJ0aE2uQ"
AWS_KEY = "AKIA" + "Q7ZK4M2PW9RT6VBN"
# The user's night: five runs of one loop on toolz, by a command agent that reports no tokens.
NIGHT = [
    RunSpec(night=1, hour=22, loop="toolz", outcome="succeeded", attempts=1),
    RunSpec(
        night=1,
        hour=23,
        loop="toolz",
        outcome="escalated",
        attempts=3,
        cause="checks-failed",
        reason=f"checks still fail after 3 attempts; AWS_ACCESS_KEY_ID={AWS_KEY}",
    ),
    RunSpec(night=1, hour=1, loop="toolz", outcome="succeeded", attempts=2),
    RunSpec(
        night=1,
        hour=2,
        loop="toolz",
        outcome="error",
        attempts=1,
        cause="loopd-error",
        task=f"Fix the bug; push with token {GITHUB_TOKEN}",
    ),
    RunSpec(night=1, hour=3, loop="toolz", outcome="succeeded", attempts=1, cause="passed"),
]


def _chromium(page: Path) -> tuple[str, str]:
    try:
        return dump_dom(page)
    except ChromiumUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"headless Chromium must run in CI: {exc}")
        pytest.skip(f"headless Chromium cannot run here: {exc}")


def _report(home: Path, page: Path) -> str:
    proc = loopd(home, "report", "--html", str(page), env={"TZ": "UTC"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _labels(now: datetime) -> list[str]:
    """The window's nights as the charts label them (7 days: eight noon-to-noon nights)."""
    first, last = night_of(now - timedelta(days=7), UTC), night_of(now, UTC)
    return [(first + timedelta(days=i)).isoformat()[5:] for i in range((last - first).days + 1)]


@pytest.fixture(scope="module")
def night(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("night")
    now = datetime.now(UTC)
    home, _, records = build_week(tmp, now, NIGHT, [])
    out = tmp / "reports"
    out.mkdir()
    page = out / "night.html"
    said = _report(home, page)
    bundle = [p for p in out.iterdir() if p.suffix == ".js"]
    stat = bundle[0].stat() if bundle else None
    second = out / "night-again.html"
    _report(home, second)
    dom, stderr = _chromium(page)
    return {
        "home": home,
        "now": now,
        "out": out,
        "page": page,
        "second": second,
        "said": said,
        "stat": stat,
        "html": page.read_text(),
        "dom": dom,
        "stderr": stderr,
        "records": records,
    }


@pytest.fixture(scope="module")
def week(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("week")
    now = datetime.now(UTC)
    runs, rules = realistic_week(now)
    home, _, records = build_week(tmp, now, runs, rules)
    page = tmp / "week.html"
    _report(home, page)
    dom, stderr = _chromium(page)
    return {"now": now, "page": page, "dom": dom, "stderr": stderr, "records": records}


def _chart(dom: str, chart: str) -> str:
    """The DOM of one chart: from its element to the next chart, table or heading."""
    start = dom.index(f'id="{chart}"')
    ends = [dom.find(m, start + 1) for m in ('<div class="chart"', '<p class="empty"', "<h2")]
    return dom[start : min(e for e in ends if e > 0)]


def _xticks(dom: str, chart: str) -> list[str]:
    """The x axis labels a chart drew, in order, once each (a panel per loop repeats them)."""
    found = re.findall(r'<g class="x\d*tick"><text[^>]*>([^<]*)</text>', _chart(dom, chart))
    return list(dict.fromkeys(found))


class _Links(HTMLParser):
    """The page's links, its elements' ids, and its table rows as lists of cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(str(a["id"]))
        if tag == "a" and a.get("href"):
            self.links.append(str(a["href"]))
        if tag == "tr":
            self.rows.append([])
        if tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self.rows:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _parse(page: str) -> _Links:
    parser = _Links()
    parser.feed(page)
    return parser


def test_a_nights_page_is_light_and_shares_one_copy_of_plotly(night: dict) -> None:
    size = night["page"].stat().st_size
    print(f"a night of {len(NIGHT)} runs: {size:,} bytes of page (limit {LIGHT:,})")
    assert size < LIGHT, size
    [bundle] = [p for p in night["out"].iterdir() if p.suffix == ".js"]
    assert bundle.name.startswith("plotly-") and bundle.name.endswith(".min.js")
    assert bundle.read_text() == get_plotlyjs()  # the package's own bundle, whole
    for page in (night["page"], night["second"]):
        scripts = re.findall(r"<script src=\"([^\"]+)\"", page.read_text())
        assert scripts == [bundle.name]  # by its relative name: no scheme, no folder, no CDN
    # The second report found the same bundle there and left it alone: one copy, once.
    again = bundle.stat()
    assert (again.st_ino, again.st_mtime_ns) == (night["stat"].st_ino, night["stat"].st_mtime_ns)
    assert bundle.name in night["said"]
    csp = re.search(r'Content-Security-Policy" content="([^"]+)"', night["html"]).group(1)
    assert "connect-src 'none'" in csp and "default-src 'none'" in csp
    script_src = csp.split("script-src")[1].split(";")[0]
    assert "'self'" in script_src and "unsafe" not in script_src
    assert "http" not in script_src and "*" not in script_src


def test_the_charts_draw_with_the_shared_library(night: dict, tmp_path: Path) -> None:
    dom = night["dom"]
    assert page_console_errors(night["stderr"], night["page"]) == []
    assert 'id="no-library"' not in dom  # plotly loaded: the warning was removed
    marks = count_marks(dom).hits
    assert marks.get(("runs", "bar"), 0) == len({r.outcome for r in NIGHT})
    assert marks.get(("attempts", "bar"), 0) == len(
        {r.attempts for r in NIGHT if r.outcome == "succeeded"}
    )
    # A page copied without its library says so where the charts would be.
    alone = tmp_path / "alone.html"
    shutil.copy(night["page"], alone)
    dom_alone, _ = _chromium(alone)
    assert 'id="no-library"' in dom_alone
    assert "wrote beside this page" in dom_alone


def test_an_empty_chart_is_one_line(night: dict) -> None:
    dom = night["dom"]
    for chart, line in (
        ("tokens", "No tokens recorded this week."),
        ("rules", "No rules in the library this week."),
    ):
        assert f'<p class="empty" id="{chart}">{line}</p>' in dom, chart
    assert "<svg" not in _chart(dom, "tokens")
    assert "−1" not in dom  # no empty axis from -1


def test_the_charts_of_nights_cover_the_same_nights(night: dict, week: dict) -> None:
    assert _xticks(night["dom"], "runs") == _labels(night["now"])
    labels = _labels(week["now"])
    for chart in ("runs", "tokens", "rules"):
        assert _xticks(week["dom"], chart) == labels, chart
    assert page_console_errors(week["stderr"], week["page"]) == []


def test_the_page_lists_the_nights_runs_each_with_a_section_and_its_folder(night: dict) -> None:
    parsed = _parse(night["dom"])
    head = ["night", "started", "run", "loop", "outcome", "cause", "attempts", "tokens", "took"]
    [at] = [i for i, row in enumerate(parsed.rows) if row == head]
    rows = parsed.rows[at + 1 : at + 1 + len(NIGHT)]
    records = sorted(night["records"], key=lambda r: r.started, reverse=True)
    for row, run in zip(rows, records, strict=True):
        night_label = night_of(run.started, UTC).isoformat()[5:]
        assert row[:6] == [
            night_label,
            run.started.strftime("%m-%d %H:%M"),
            run.id,
            run.loop,
            run.outcome,
            str(run.cause or "-"),
        ], row
        assert f"#run-{run.id}" in parsed.links
        assert f"run-{run.id}" in parsed.ids  # the section the row links to
        folder = night["home"] / "state" / "runs" / run.id
        assert folder.is_dir()
        assert folder.resolve().as_uri() + "/" in parsed.links


def test_nothing_the_page_shows_escapes_redaction(night: dict) -> None:
    for text in (night["html"], night["dom"]):
        assert GITHUB_TOKEN not in text and AWS_KEY not in text
        assert "[REDACTED:" in text
    assert redact(night["html"]) == night["html"]


def test_a_busy_week_stays_light_and_lists_its_newest_runs(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    runs, rules = realistic_week(now)
    sizes = []
    page = tmp_path / "week.html"
    home, _, _ = build_week(tmp_path / "realistic", now, runs, rules)
    _report(home, page)
    sizes.append(("a realistic week", len(runs), page.stat().st_size))
    outcomes = ("succeeded", "escalated", "succeeded", "error")
    # Nights 1-6: each of their runs is inside the 7-day window at any hour of the day. The
    # seventh night's evening runs leave the window as today's clock passes their hour (this
    # test failed when run after 20:07 UTC).
    busy = [
        RunSpec(night=n, hour=h, loop=f"loop-{i:02d}", outcome=o, attempts=2, tokens=30_000)
        for i in range(20)
        for n in range(1, 7)
        for h, o in zip((20, 23, 2, 5), outcomes, strict=True)
    ]
    home, _, _ = build_week(tmp_path / "busy", now, busy, rules)
    page_busy = tmp_path / "busy.html"
    _report(home, page_busy)
    sizes.append(("20 loops, 4 runs a night", len(busy), page_busy.stat().st_size))
    for what, count, size in sizes:
        print(f"{what} ({count} runs): {size:,} bytes (limit {LIGHT:,})")
        assert size < LIGHT, (what, size)
    listed = _parse(page_busy.read_text())
    assert len([a for a in listed.links if a.startswith("#run-")]) == LISTED_MAX
    assert f"{len(busy) - LISTED_MAX} older run(s)" in page_busy.read_text()


def test_a_window_without_runs_is_a_line_per_chart(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    home, _, _ = build_week(tmp_path, now, [], [])

    def two_nights(moment: datetime) -> str:
        return (
            f"from the night of {night_of(moment - timedelta(days=2), UTC).isoformat()} "
            f"to that of {night_of(moment, UTC).isoformat()}"
        )

    for since in ("7d", "2d"):
        page = tmp_path / f"empty-{since}.html"
        before = datetime.now(UTC)
        proc = loopd(home, "report", "--html", str(page), "--since", since, env={"TZ": "UTC"})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        # The report reads its own clock: noon UTC may pass between this test's and its own.
        moments = (before, datetime.now(UTC))
        spans = {"this week"} if since == "7d" else {two_nights(m) for m in moments}
        text = page.read_text()
        assert '<div class="chart">' not in text
        runs = [f'<p class="empty" id="runs">No runs {span}.</p>' for span in spans]
        assert any(line in text for line in runs), text
        assert any(
            f'<p class="empty" id="tokens">No tokens recorded {span}.</p>' in text for span in spans
        )
        assert '<p class="empty" id="attempts">' in text and '<p class="empty" id="rules">' in text
        assert '<h2 id="run-list">Runs</h2>\n<p>None.</p>' in text
