"""The HTML report's charts, drawn by plotly (imported inside each function, so importing
this module costs nothing): runs per loop per night by outcome, tokens and cost per night,
attempts to success, the rule library by status.

The charts of nights share one x axis: every night of the window, in order, shown whole. A
chart with nothing to draw is one line instead, `<p class="empty" id=...>`; a drawn one is
the `<div id=...>` plotly fills (`runs`, `tokens`, `attempts`, `rules`), so a test can count
what plotly drew inside it. The charts carry only loop names (redacted by report_nights.py),
outcomes, dates and numbers.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from datetime import timedelta
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


def _nights_axis(data: Nights) -> dict[str, Any]:
    """The x axis every chart of nights shares: each night of the window, in order, shown
    whole (plotly would otherwise show only the nights with data, or -1..6 when it has none)."""
    labels = [n.isoformat()[5:] for n in data.nights]
    return {
        "type": "category",
        "categoryorder": "array",
        "categoryarray": labels,
        "range": [-0.5, len(labels) - 0.5],
        "fixedrange": True,
    }


def runs_figure(data: Nights) -> Any:
    """Stacked bars: runs per night by outcome, one panel per loop (empty cells left out)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    loops = sorted({loop for per in data.runs.values() for loop in per})
    seen = {o for p in data.runs.values() for c in p.values() for o in c}
    outcomes = [o for o in OUTCOME_COLORS if o in seen] + sorted(seen - set(OUTCOME_COLORS))
    nights = [n.isoformat() for n in data.nights]
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
        fig.update_xaxes(**_nights_axis(data), row=row, col=1)
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
        xaxis=_nights_axis(data),
        yaxis={"title": "tokens", "rangemode": "tozero"},
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
        yaxis={"title": "runs", "rangemode": "tozero"},
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
        xaxis=_nights_axis(data),
        yaxis={"title": "rules", "rangemode": "tozero"},
    )
    return fig


def _span(data: Nights) -> str:
    """The window in words, for a line that stands where an empty chart would be."""
    if data.generated - data.since == timedelta(days=7):
        return "this week"
    first, last = data.nights[0], data.nights[-1]
    if first == last:
        return f"the night of {first.isoformat()}"
    return f"from the night of {first.isoformat()} to that of {last.isoformat()}"


# Each chart: its div id, whether it has anything to draw, the figure, and the one line
# that stands in its place when it has not.
CHARTS: tuple[tuple[str, Callable[[Nights], bool], Callable[[Nights], Any], str], ...] = (
    ("runs", lambda d: d.total_runs > 0, runs_figure, "No runs {span}."),
    (
        "tokens",
        lambda d: any(d.tokens.values()) or any(d.cost.values()),
        tokens_figure,
        "No tokens recorded {span}.",
    ),
    (
        "attempts",
        lambda d: any(n for tries in d.attempts_to_success.values() for n in tries.values()),
        attempts_figure,
        "No run succeeded {span}: no attempts to success to count.",
    ),
    (
        "rules",
        lambda d: any(n for counts in d.rules.values() for n in counts.values()),
        rules_figure,
        "No rules in the library {span}.",
    ),
)


def charts(data: Nights) -> list[str]:
    """Each chart drawn by plotly (its bundle loaded once, from the file beside the page), or
    its one line when it has nothing to draw."""
    import plotly.io as pio

    out = []
    for div_id, has_data, figure, empty in CHARTS:
        if not has_data(data):
            line = empty.format(span=_span(data))
            out.append(f'<p class="empty" id="{div_id}">{html.escape(line)}</p>')
            continue
        chart = pio.to_html(
            figure(data),
            include_plotlyjs=False,
            full_html=False,
            div_id=div_id,
            config=CONFIG,
            default_width=f"{WIDTH}px",
            default_height=f"{HEIGHT}px",
        )
        out.append(f'<div class="chart">{chart}</div>')
    return out
