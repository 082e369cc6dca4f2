"""`loopd --help` and `loopd COMMAND --help` import no command's module (cli/parsers.py holds
every parser and help text); a parsed command imports its own module alone."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.cli.invoke import function_of
from daemon.cli.main import build_parser, main
from tests.helpers import ROOT, make_home


def subparsers(parser: argparse.ArgumentParser) -> list[argparse._SubParsersAction]:
    return [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]


def command_parsers() -> list[tuple[list[str], str, argparse.ArgumentParser]]:
    """(command line, its line in its group's help, its parser) of every command and action."""
    found = []

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        for group in subparsers(parser):
            helps = {a.dest: a.help for a in group._choices_actions}
            for name, child in group.choices.items():
                found.append(([*path, name], helps[name], child))
                walk(child, [*path, name])

    walk(build_parser(), [])
    return found


def help_lines() -> list[list[str]]:
    return [[]] + [line for line, _, _ in command_parsers()]


def test_each_help_text_is_its_functions_docstring() -> None:
    """A command's line in `loopd --help` and its description are its function's docstring
    (its first line): kept as text in cli/parsers.py, they cannot drift from the code."""
    checked = 0
    for line, help_text, parser in command_parsers():
        func = parser.get_default("func")
        if not isinstance(func, str):
            continue  # a group that prints its own help, or one that needs an action
        doc = function_of(func).__doc__
        assert doc, f"loopd {' '.join(line)}: {func} has no docstring"
        if subparsers(parser):
            continue  # a group (rules, escalations): its own line, its default action's doc
        assert help_text == doc.strip().splitlines()[0], " ".join(line)
        assert parser.description == doc, " ".join(line)
        checked += 1
    assert checked >= 30


def test_every_command_names_a_function_of_its_module() -> None:
    for line, _, parser in command_parsers():
        func = parser.get_default("func")
        if isinstance(func, str):
            module, name = func.split(":")
            assert callable(getattr(importlib.import_module(f"daemon.cli.{module}"), name)), line


def test_help_imports_no_command_module() -> None:
    """`loopd --help` and every `loopd COMMAND [ACTION] --help` in one fresh interpreter: only
    the parsers are loaded, nothing of a command, of the configuration or of pydantic."""
    code = (
        "import json, sys\n"
        "from daemon.cli.main import main\n"
        f"for line in {help_lines()!r}:\n"
        "    try:\n"
        "        main([*line, '--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.splitlines()
    loaded = set(json.loads(out[-1]))
    ours = {m for m in loaded if m == "daemon" or m.startswith("daemon.")}
    parsers = {"daemon.cli.main", "daemon.cli.parsers", "daemon.cli.learning_parsers"}
    assert ours == {"daemon", "daemon.cli", "daemon.cli.arguments", *parsers}
    assert not {"pydantic", "rich", "tomllib"} & loaded


def test_a_command_loads_its_own_module_alone(tmp_path: Path) -> None:
    """`loopd status` in a fresh interpreter: no other command's module, no daemon, no run."""
    home = make_home(tmp_path / "home")
    code = (
        "import sys\n"
        "from daemon.cli.main import main\n"
        f"main(['--home', {str(home)!r}, 'status', '--json'])\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('daemon'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.splitlines()
    loaded = set(out[-1].split())
    cli = {m.removeprefix("daemon.cli.") for m in loaded if m.startswith("daemon.cli.")}
    shared = {
        "main",
        "parsers",
        "learning_parsers",
        "arguments",
        "invoke",
        "common",
        "runview",
        "statusview",
        "engine_views",
        "jsonout",
        "statusdata",
    }
    # Its plain path first (cli/plainstatus.py; no facts kept yet), then its full path.
    assert cli - shared == {"plainstatus", "daemon"}
    assert not {"daemon.daemon", "daemon.runs.executor", "daemon.runs.finish"} & loaded


@pytest.mark.parametrize("tail", [["status"], ["status", "--json"]])
def test_status_loads_no_secret_rules(tmp_path: Path, tail: list[str]) -> None:
    """`loopd status` redacts nothing, so neither the secret rule set nor re2 is imported
    (they are loaded on first redaction: issue 23's read path)."""
    home = make_home(tmp_path / "home")
    code = (
        "import sys\n"
        "from daemon.cli.main import main\n"
        f"main(['--home', {str(home)!r}, *{tail!r}])\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.splitlines()
    loaded = set(out[-1].split())
    assert "daemon.state.store" in loaded  # it did read the home
    assert not {"daemon.redaction.ruleset", "re2"} & loaded


@pytest.mark.parametrize("argv", [[], ["hooks"]])
def test_no_command_prints_the_help_and_exits_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert "usage: loopd" in capsys.readouterr().out
