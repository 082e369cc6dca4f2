"""A run as the commands print it on either engine: the runs table, a run's outcome, its exit."""

from __future__ import annotations

from typing import Any

from daemon.people.digest import checks_word
from daemon.people.landstate import landing_state
from daemon.people.terminal import clean
from daemon.people.terminal import markup as m
from daemon.state.records import DONE_OUTCOMES

RunRow = tuple[str, str, str, str, str, str]  # run, trigger, outcome, att, score, reason
REASON_COLUMN = 40  # narrower than this, a reason goes on its own line under its run


def runs_table(title: str, rows: list[RunRow], width: int) -> Any:
    """`loopd runs` (either engine) in `width` columns: RUN_IDs whole, reasons readable.

    Where the reason column would be narrower than REASON_COLUMN (80 columns), each reason
    goes on its own line under its run, indented, instead of a word per line.
    """
    from rich import box
    from rich.console import Group
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    fixed = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(RUN_HEADINGS)]
    if width - (sum(fixed) + 3 * len(fixed)) >= REASON_COLUMN:
        table = Table(title=m(title), box=box.SIMPLE_HEAD, pad_edge=False)
        # The RUN_ID is what a person copies: never wrapped or cut.
        table.add_column("run", no_wrap=True, min_width=fixed[0])
        table.add_column("trigger", no_wrap=True)
        table.add_column("outcome", no_wrap=True)
        table.add_column("att", justify="right")
        table.add_column("score", justify="right")
        table.add_column("reason", min_width=10)
        for row in rows:
            table.add_row(*row[:5], m(row[5]))
        return table

    # Columns laid out by hand: a table cell cannot span the row the reason needs.
    def line(cells: tuple[str, ...]) -> str:
        out = [
            c.rjust(w) if i >= 3 else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, fixed, strict=True))
        ]
        return "  ".join(out).rstrip()

    parts: list[Any] = [Text(title, justify="center", style="italic")]
    parts.append(Text(line(RUN_HEADINGS), style="bold", no_wrap=True, overflow="ignore"))
    parts.append(Text("  reason", style="bold", no_wrap=True))
    parts.append(Text("─" * min(width, len(line(RUN_HEADINGS))), no_wrap=True))
    for row in rows:
        parts.append(Text(line(row[:5]), no_wrap=True, overflow="ignore"))
        if row[5]:
            # Agent text may be in it: shown as written, never read as markup.
            parts.append(Padding(Text(row[5], overflow="fold"), (0, 0, 0, 2)))
    return Group(*parts)


RUN_HEADINGS = ("run", "trigger", "outcome", "att", "score")


def exit_code(run: Any) -> int:
    """0 for a run that did its job: succeeded (landed or not) or skipped (already done)."""
    return 0 if run.outcome in DONE_OUTCOMES else 1


def print_outcome(run: Any) -> None:
    """A finished run's outcome, attempts and landing, as `once` and `trigger --wait` print."""
    print(f"{run.outcome}: {clean(run.reason)}")
    for a in run.attempts:
        score = "-" if a.score is None else a.score
        print(
            f"  attempt {a.n}: checks {checks_word(a.checks_passed)}, score {score}, "
            f"nudges {a.nudges}, exit {a.exit_code}"
        )
    if run.branch and run.isolation != "in-place" and run.outcome != "skipped":
        print(f"  branch {run.branch}")
    if run.outcome == "succeeded":
        print(f"  {clean(landing_state(run).line())}")
    if run.cost_usd:
        print(f"  cost ${run.cost_usd:.4f} ({run.input_tokens} in, {run.output_tokens} out)")
    if run.waited:
        print(f"  parked {run.waited}s on usage limits")
