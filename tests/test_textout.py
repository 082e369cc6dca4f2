"""cli/textout.py: the read commands' text without rich: wrapping, tables that fit, colour
only where a terminal takes it."""

from __future__ import annotations

import io

from daemon.cli.textout import Column, Terminal, table, wrap


def test_wrap_breaks_between_words_and_folds_a_long_one() -> None:
    assert wrap("one two three", 7) == ["one two", "three"]
    assert wrap("x " + "y" * 12, 5) == ["x", "yyyyy", "yyyyy", "yy"]
    assert wrap("a\nb c", 80) == ["a", "b c"]


def test_a_table_narrows_its_widest_wrapping_column_to_fit() -> None:
    rows = [["loop", "a phase that is long and wraps", "20261205T011401Z-calc-cc65"]]
    columns = [Column("loop"), Column("phase", least=8), Column("run", wrap=False)]
    lines = table(Terminal(width=50), "home", columns, rows)
    assert max(len(line) for line in lines) == 50
    assert any("20261205T011401Z-calc-cc65" in line for line in lines)  # never cut
    assert lines[1].startswith("┏") and lines[-1].startswith("└")
    phase = " ".join(line.split("│")[2].strip() for line in lines if line.startswith("│ "))
    assert phase.split() == "a phase that is long and wraps".split()


def test_colour_only_on_a_terminal_that_takes_it(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    piped = Terminal.of(io.StringIO())
    assert (piped.width, piped.colour) == (80, False)
    assert piped.paint("warning", "yellow") == "warning"
    assert Terminal(80, colour=True).paint("warning", "yellow") == "\x1b[33mwarning\x1b[0m"
    monkeypatch.setenv("COLUMNS", "120")
    assert Terminal.of(io.StringIO()).width == 120


def test_words_stay_whole_while_another_column_can_give_way() -> None:
    rows = [["stopped_early", "not judged by a model (critic = off); the checks passed."]]
    lines = table(Terminal(width=40), "", [Column("stalls"), Column("verdict")], rows)
    assert any("│ stopped_early │" in line for line in lines)
    assert max(len(line) for line in lines) <= 40
