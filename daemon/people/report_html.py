"""`loopd report --html FILE`: one page with charts drawn by plotly, and the runs it counted.

plotly draws the charts. Its JavaScript bundle (shipped in the Python package, about 5 MB)
is not inlined: `library()` gives it as one file, which the command writes beside the page
once (`plotly-VERSION.min.js`), shared by every report in that folder, and the page loads it
by its relative name, so it opens from file:// with no network and weighs what its data
weighs. Its content-security policy allows only the page's own inline scripts (by hash) and
scripts of its own place or of local files (`'self' file:`: the file beside it), no
connection (`connect-src 'none'`), no form, no frame. Every text that came from state
(reasons, tasks, paths, loop names) is redacted and HTML-escaped; the charts carry only loop
names, outcomes, dates and numbers.

The charts are report_charts.py's. The page is a list of sections (`SECTIONS`), each a
function of the counted `Nights` giving its lines of HTML: a new section is one function
added there. The runs are listed newest first, each linking to a section of its own.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from collections.abc import Callable
from pathlib import Path

from daemon.people.report_charts import charts
from daemon.people.report_nights import RULE_STATUSES, Nights, RunLine
from daemon.redact import redact

_SCRIPT = re.compile(r"<script\b[^>]*>(.*?)</script>", re.DOTALL | re.IGNORECASE)


def _e(text: object) -> str:
    """A text from state as the page shows it: redacted, then HTML-escaped."""
    return html.escape(redact(str(text)), quote=True)


def _took(line: RunLine) -> str:
    if line.finished is None:
        return "-"
    seconds = max(0, int((line.finished - line.started).total_seconds()))
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
        if seconds >= 3600
        else (f"{seconds // 60}m{seconds % 60:02d}s")
    )


def _runs_table(data: Nights) -> list[str]:
    """The window's runs, newest first: each links to its section further down the page."""
    out = ['<h2 id="run-list">Runs</h2>']
    if not data.listed:
        return [*out, "<p>None.</p>"]
    out.append(
        "<table><tr><th>night</th><th>started</th><th>run</th><th>loop</th><th>outcome</th>"
        "<th>cause</th><th>attempts</th><th>tokens</th><th>took</th></tr>"
    )
    for line in data.listed:
        out.append(
            f"<tr><td>{_e(line.night[5:])}</td><td>{line.when}</td>"
            f'<td><a href="#run-{_e(line.id)}">{_e(line.id)}</a></td><td>{_e(line.loop)}</td>'
            f"<td>{_e(line.outcome)}</td><td>{_e(line.cause or '-')}</td>"
            f"<td>{len(line.attempts)}</td><td>{line.tokens}</td><td>{_took(line)}</td></tr>"
        )
    out.append("</table>")
    if data.unlisted:
        out.append(
            f"<p>{data.unlisted} older run(s) of the window are not listed: "
            "<code>loopd runs</code> lists them.</p>"
        )
    return out


def _run_sections(data: Nights) -> list[str]:
    """A section per listed run: what its record says, its attempts, where its files are."""
    if not data.listed:
        return []
    out = ["<h2>Each run</h2>"]
    for line in data.listed:
        cost = f", ${line.cost:.2f}" if line.cost else ""
        landed = ""
        if line.branch and line.landed is not None:
            landed = " (landed)" if line.landed else " (not landed)"
        out.append(
            f'<section class="run" id="run-{_e(line.id)}"><h3>{_e(line.id)}</h3>'
            f"<p>loop <b>{_e(line.loop)}</b> · {_e(line.outcome)}"
            + (f" ({_e(line.cause)})" if line.cause else "")
            + f" · {_e(line.trigger)} · {line.when} to {line.until}"
            f" ({_took(line)}) · {line.tokens} tokens{cost}</p>"
            f"<p>task: {_e(line.task)}</p>"
            + (f"<p>why: {_e(line.reason)}</p>" if line.reason else "")
        )
        if line.attempts:
            out.append(
                "<table><tr><th>attempt</th><th>exit</th><th>checks</th><th>score</th>"
                "<th>tokens</th><th>verdict</th></tr>"
            )
            for a in line.attempts:
                score = "-" if a.score is None else str(a.score)
                code = "-" if a.exit_code is None else str(a.exit_code)
                out.append(
                    f"<tr><td>{a.n}</td><td>{code}</td><td>{_e(a.checks)}</td><td>{score}</td>"
                    f"<td>{a.tokens}</td><td>{_e(a.verdict)}</td></tr>"
                )
            out.append("</table>")
        branch = f"branch <code>{_e(line.branch)}</code>{landed} · " if line.branch else ""
        folder = Path(line.folder)
        out.append(
            f"<p>{branch}<code>loopd show {_e(line.id)}</code> · "
            f"<code>loopd logs {_e(line.id)}</code> · its files: "
            f'<a href="{_e(folder.as_uri())}/">{_e(folder)}/</a></p></section>'
        )
    return out


def _verified_table(data: Nights) -> list[str]:
    """Per night: attempts that passed the checks and the judge, the judge's measured
    false-pass rate beside them, and how many of them are correct by that rate."""
    rows = [(night, v) for night, v in sorted(data.verified.items()) if v.verified or v.caught]
    if not rows:
        return []
    out = [
        "<h2>Verified correct</h2><table><tr><th>night</th><th>verified</th><th>judge failed</th>"
        "<th>judge's false-pass rate (95% CI)</th><th>correct, estimated</th></tr>"
    ]
    for night, v in rows:
        rate, correct = "no calibration (<code>loopd calibrate</code>)", "-"
        if v.false_pass_rate is not None:
            low, high = v.false_pass_ci
            rate = f"{v.false_pass_rate:.0%} ({low:.0%}-{high:.0%}) for {_e(v.judge)}"
            correct = f"{v.correct[0]:g} to {v.correct[1]:g}"
        out.append(
            f"<tr><td>{_e(night)}</td><td>{v.verified}</td><td>{v.caught}</td>"
            f"<td>{rate}</td><td>{correct}</td></tr>"
        )
    out.append("</table>")
    return out


def _kinds_table(data: Nights) -> list[str]:
    """The rule library by kind: how many of each are live or not now, what moved since."""
    if not data.kinds:
        return []
    heads = (*RULE_STATUSES, "learned", "promoted", "demoted")
    names = [*RULE_STATUSES, "learned since", "promoted since", "demoted since"]
    out = [
        '<h2>Rules by kind</h2><table id="kinds"><tr><th>kind</th>'
        + "".join(f"<th>{name}</th>" for name in names)
        + "</tr>"
    ]
    for kind, counts in data.kinds.items():
        cells = "".join(f"<td>{counts.get(h, 0)}</td>" for h in heads)
        out.append(f"<tr><td>{_e(kind)}</td>{cells}</tr>")
    out.append("</table>")
    return out


def _escalations_table(data: Nights) -> list[str]:
    """The open escalations, each linking to its file."""
    out = ["<h2>Open escalations</h2>"]
    if data.escalations:
        out.append(
            "<table><tr><th>run</th><th>loop</th><th>escalated</th><th>runs</th><th>cause</th>"
            "<th>why</th></tr>"
        )
        for e in data.escalations:
            link = _e(Path(e.file).as_uri())
            out.append(
                f'<tr><td><a href="{link}">{_e(e.run)}</a></td><td>{_e(e.loop)}</td>'
                f"<td>{_e(e.escalated.strftime('%Y-%m-%d %H:%MZ'))}</td><td>{e.count}</td>"
                f"<td>{_e(e.cause)}</td>"
                f"<td>{_e(e.reason)}</td></tr>"
            )
        out.append("</table>")
    else:
        out.append("<p>None waiting.</p>")
    return out


def _ready_table(data: Nights) -> list[str]:
    """The branches of succeeded runs that wait to land, and the command to review each."""
    out = ["<h2>Branches ready to land</h2>"]
    if data.ready:
        out.append(
            "<p>Runs that succeeded and have not landed; their branch is in the loop's "
            "repository.</p><table><tr><th>run</th><th>loop</th><th>branch</th>"
            "<th>changes</th><th>review with</th></tr>"
        )
        for r in data.ready:
            review = f"git -C {r.repo} log -p {r.branch}"
            out.append(
                f"<tr><td>{_e(r.run)}</td><td>{_e(r.loop)}</td>"
                f"<td><code>{_e(r.branch)}</code></td>"
                f"<td>{r.files} file(s), +{r.added} -{r.removed}</td>"
                f"<td><code>{_e(review)}</code></td></tr>"
            )
        out.append("</table>")
    else:
        out.append("<p>None.</p>")
    return out


# The page, top to bottom: a new section is a function of the counted nights added here.
SECTIONS: tuple[Callable[[Nights], list[str]], ...] = (
    charts,
    _runs_table,
    _kinds_table,
    _verified_table,
    _escalations_table,
    _ready_table,
    _run_sections,
)


STYLE = """
body { font-family: "Liberation Sans", Arial, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 28px; }
p.meta { color: #555; margin-top: 0; } table { border-collapse: collapse; font-size: 13px; }
td, th { border: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } code { font-size: 12px; } .chart { margin: 8px 0; }
p.empty { color: #555; margin: 12px 0; } p.warn { color: #c62828; }
section.run { border-top: 1px solid #ddd; margin-top: 12px; } h3 { font-size: 14px; }
"""


def library() -> tuple[str, str]:
    """plotly's bundle as the file the pages load: its name (by version) and its text."""
    from plotly.offline import get_plotlyjs, get_plotlyjs_version

    return f"plotly-{get_plotlyjs_version()}.min.js", get_plotlyjs()


# Said where the charts would be when the library beside the page did not load (the page
# was copied without it); the page's first inline script removes it when plotly is there.
_NO_LIBRARY = (
    '<p class="warn" id="no-library">The charts did not draw: they need {name}, which loopd '
    "wrote beside this page; copy it with the page.</p>"
    '<script>if (window.Plotly) document.getElementById("no-library").remove();</script>'
)


def render_page(data: Nights, library_name: str) -> str:
    """The whole page: plotly loaded from `library_name` beside it, the sections, a strict
    CSP (inline scripts by hash; scripts of the page's own place; no connection)."""
    runs = data.total_runs
    tokens = sum(data.tokens.values())
    cost = sum(data.cost.values())
    meta = (
        f"{_e(data.home)} · {data.since:%Y-%m-%d %H:%M}Z to {data.generated:%Y-%m-%d %H:%M}Z · "
        f"{runs} run(s), {tokens} tokens" + (f", ${cost:.2f}" if cost else "")
    )
    body = (
        f'<h1>loopd report</h1><p class="meta">{meta}</p>\n'
        + _NO_LIBRARY.format(name=_e(library_name))
        + "\n"
        + "\n".join(part for section in SECTIONS for part in section(data))
        + '\n<p class="meta">Nights run from noon to noon; the night of a date is its evening.</p>'
    )
    hashes = " ".join(
        f"'sha256-{base64.b64encode(hashlib.sha256(s.encode('utf-8')).digest()).decode()}'"
        for s in _SCRIPT.findall(body)
    )
    # 'self' file:: the library beside the page. A hash cannot pin it (browsers refuse
    # Subresource Integrity on file: URLs); Chromium counts any file: URL as a file: page's
    # 'self', and `file:` says the same to a browser that does not. No http(s) source.
    csp = (
        f"default-src 'none'; script-src 'self' file: {hashes}; style-src 'unsafe-inline'; "
        "img-src data:; font-src data:; connect-src 'none'; base-uri 'none'; "
        "form-action 'none'"
    )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
        f"<title>loopd report</title><style>{STYLE}</style>\n"
        f'<script src="{_e(library_name)}" charset="utf-8"></script></head>\n'
        f"<body>\n{body}\n</body></html>\n"
    )
