"""`loopd report --html FILE`: one self-contained page with charts drawn by plotly.

plotly draws the charts (its JavaScript bundle, shipped in the Python package, is inlined
once), so the page opens with no network. Its content-security policy allows only the
page's own scripts (by hash), no connection (`connect-src 'none'`), no form, no frame.
Every text that came from state (reasons, tasks, paths) is HTML-escaped; the charts carry
only loop names, outcomes, dates and numbers.

Each chart is a `<div id=...>` (`runs`, `tokens`, `attempts`, `rules`), so a test can count
what plotly drew inside it.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from pathlib import Path
from typing import Any

from daemon.people.report_nights import RULE_STATUSES, Nights

OUTCOME_COLORS = {
    "succeeded": "#2e7d32",
    "skipped": "#90caf9",
    "escalated": "#ef6c00",
    "refused": "#6a1b9a",
    "error": "#c62828",
    "interrupted": "#757575",
    "cancelled": "#bdbdbd",
    "running": "#fbc02d",
}
RULE_COLORS = {"trial": "#64b5f6", "active": "#2e7d32", "retired": "#9e9e9e", "rejected": "#e57373"}
_SCRIPT = re.compile(r"<script\b[^>]*>(.*?)</script>", re.DOTALL | re.IGNORECASE)
CONFIG = {"displayModeBar": False, "responsive": False}
WIDTH, HEIGHT = 900, 340


def _layout(title: str, **more: Any) -> dict[str, Any]:
    return {
        "title": {"text": title, "x": 0.01},
        "width": WIDTH,
        "height": HEIGHT,
        "margin": {"l": 60, "r": 60, "t": 50, "b": 60},
        "legend": {"orientation": "h", "y": -0.2},
        "template": "plotly_white",
        **more,
    }


def runs_figure(data: Nights) -> Any:
    """Stacked bars: runs per night by outcome, one panel per loop (empty cells left out)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    loops = sorted({loop for per in data.runs.values() for loop in per}) or ["(no runs)"]
    seen = {o for p in data.runs.values() for c in p.values() for o in c}
    outcomes = [o for o in OUTCOME_COLORS if o in seen] + sorted(seen - set(OUTCOME_COLORS))
    nights = [n.isoformat() for n in data.nights]
    labels = [n[5:] for n in nights]
    fig = make_subplots(
        rows=len(loops),
        cols=1,
        shared_xaxes=True,
        subplot_titles=loops,
        vertical_spacing=min(0.08, 0.3 / len(loops)),
    )
    in_legend: set[str] = set()
    for row, loop in enumerate(loops, start=1):
        for outcome in outcomes:
            cells = [(n[5:], data.runs.get(n, {}).get(loop, {}).get(outcome, 0)) for n in nights]
            cells = [(x, y) for x, y in cells if y]
            # Each outcome once in the legend, from the first panel that has it.
            legend = bool(cells) and outcome not in in_legend
            in_legend.update([outcome] if legend else [])
            fig.add_trace(
                go.Bar(
                    name=outcome,
                    x=[x for x, _ in cells],
                    y=[y for _, y in cells],
                    marker_color=OUTCOME_COLORS.get(outcome, "#455a64"),
                    legendgroup=outcome,
                    showlegend=legend,
                ),
                row=row,
                col=1,
            )
        # Every night in order, so a night with one outcome only keeps its place.
        fig.update_xaxes(
            type="category", categoryorder="array", categoryarray=labels, row=row, col=1
        )
        fig.update_yaxes(title_text="runs", rangemode="tozero", row=row, col=1)
    layout = _layout("Runs per loop per night, by outcome")
    layout["height"] = 120 + 170 * len(loops)
    fig.update_layout(**layout, barmode="stack")
    return fig


def tokens_figure(data: Nights) -> Any:
    """Bars of tokens per night and, where agents reported one, a line of the cost."""
    import plotly.graph_objects as go

    nights = [n.isoformat() for n in data.nights]
    fig = go.Figure()
    with_tokens = [n for n in nights if data.tokens.get(n)]
    fig.add_trace(
        go.Bar(
            name="tokens",
            x=[n[5:] for n in with_tokens],
            y=[data.tokens[n] for n in with_tokens],
            marker_color="#5c6bc0",
        )
    )
    with_cost = [n for n in nights if data.cost.get(n)]
    if with_cost:
        fig.add_trace(
            go.Scatter(
                name="cost (USD)",
                x=[n[5:] for n in with_cost],
                y=[data.cost[n] for n in with_cost],
                mode="lines+markers",
                yaxis="y2",
                line={"color": "#ef6c00"},
            )
        )
    title = (
        "Tokens and cost per night" if with_cost else "Tokens per night (no agent reported a cost)"
    )
    fig.update_layout(
        **_layout(title),
        xaxis={
            "type": "category",
            "categoryorder": "array",
            "categoryarray": [n[5:] for n in nights],
        },
        yaxis={"title": "tokens"},
        yaxis2={"title": "USD", "overlaying": "y", "side": "right", "rangemode": "tozero"},
    )
    return fig


def attempts_figure(data: Nights) -> Any:
    """Bars: succeeded runs by the number of attempts they took, per loop."""
    import plotly.graph_objects as go

    most = max((n for tries in data.attempts_to_success.values() for n in tries), default=1)
    fig = go.Figure()
    for loop in sorted(data.attempts_to_success):
        tries = data.attempts_to_success[loop]
        xs = [str(n) for n in sorted(tries) if tries[n]]
        fig.add_trace(go.Bar(name=loop, x=xs, y=[tries[int(x)] for x in xs]))
    fig.update_layout(
        **_layout("Attempts to success (succeeded runs)"),
        barmode="group",
        xaxis={
            "title": "attempts",
            "type": "category",
            "categoryorder": "array",
            "categoryarray": [str(n) for n in range(1, most + 1)],
        },
        yaxis={"title": "runs"},
    )
    return fig


def rules_figure(data: Nights) -> Any:
    """Stacked areas: the rule library at the end of each night, by status."""
    import plotly.graph_objects as go

    nights = [n.isoformat() for n in data.nights]
    fig = go.Figure()
    for status in RULE_STATUSES:
        ys = [data.rules.get(n, {}).get(status, 0) for n in nights]
        if not any(ys):
            continue
        fig.add_trace(
            go.Scatter(
                name=status,
                x=[n[5:] for n in nights],
                y=ys,
                mode="lines+markers",
                stackgroup="rules",
                line={"color": RULE_COLORS[status]},
            )
        )
    fig.update_layout(
        **_layout("The rule library at the end of each night, by status"),
        xaxis={"type": "category"},
        yaxis={"title": "rules"},
    )
    return fig


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


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


def _tables(data: Nights) -> str:

    out = [*_kinds_table(data), *_verified_table(data), "<h2>Open escalations</h2>"]
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
    out.append("<h2>Branches ready to land</h2>")
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
    return "\n".join(out)


STYLE = """
body { font-family: "Liberation Sans", Arial, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 28px; }
p.meta { color: #555; margin-top: 0; } table { border-collapse: collapse; font-size: 13px; }
td, th { border: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } code { font-size: 12px; } .chart { margin: 8px 0; }
"""


def render_page(data: Nights) -> str:
    """The whole page: charts (plotly's bundle inlined once), tables, a strict CSP."""
    import plotly.io as pio

    parts = []
    for index, (div_id, fig) in enumerate(
        (
            ("runs", runs_figure(data)),
            ("tokens", tokens_figure(data)),
            ("attempts", attempts_figure(data)),
            ("rules", rules_figure(data)),
        )
    ):
        chart = pio.to_html(
            fig,
            include_plotlyjs=index == 0,
            full_html=False,
            div_id=div_id,
            config=CONFIG,
            default_width=f"{WIDTH}px",
            default_height=f"{HEIGHT}px",
        )
        parts.append(f'<div class="chart">{chart}</div>')
    runs = data.total_runs
    tokens = sum(data.tokens.values())
    cost = sum(data.cost.values())
    meta = (
        f"{_e(data.home)} · {data.since:%Y-%m-%d %H:%M}Z to {data.generated:%Y-%m-%d %H:%M}Z · "
        f"{runs} run(s), {tokens} tokens" + (f", ${cost:.2f}" if cost else "")
    )
    body = (
        f'<h1>loopd report</h1><p class="meta">{meta}</p>\n'
        + "\n".join(parts)
        + "\n"
        + _tables(data)
        + '\n<p class="meta">Nights run from noon to noon; the night of a date is its evening.</p>'
    )
    hashes = " ".join(
        f"'sha256-{base64.b64encode(hashlib.sha256(s.encode('utf-8')).digest()).decode()}'"
        for s in _SCRIPT.findall(body)
    )
    csp = (
        f"default-src 'none'; script-src {hashes}; style-src 'unsafe-inline'; img-src data:; "
        "font-src data:; connect-src 'none'; base-uri 'none'; form-action 'none'"
    )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
        f"<title>loopd report</title><style>{STYLE}</style></head>\n"
        f"<body>\n{body}\n</body></html>\n"
    )
