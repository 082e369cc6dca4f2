"""The loop file `loopd new` writes: a repository's guesses (guess.py) as `loops/NAME.toml`,
each guessed key under a comment saying where it came from, never over an existing file."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterable
from pathlib import Path

import tomli_w

from daemon.config.errors import ConfigError
from daemon.config.guess import Found, Guess
from daemon.config.home_file import DaemonConfig
from daemon.config.loading import check_loop_name
from daemon.config.loop_file import LoopConfig
from daemon.state.atomic import write_atomic

COMMENT_WIDTH = 96
DEFAULT_TASK = "Make the failing tests pass without weakening them."


class LoopNotWritten(Exception):
    """The loop file was not written; the message says why and what to do."""


def name_problems(name: str, path: Path) -> list[ConfigError]:
    """What is wrong with NAME as a loop's name, as loading the file would say it."""
    return check_loop_name(name, path)


def choose_agent(config: DaemonConfig, asked: str) -> Found:
    """The loop's agent: `asked`, else the only or first profile of loopd.toml, else the loop
    file's default; where the choice came from."""
    profiles = list(config.agents)
    if asked:
        if config.profile(asked) is None:
            known = ", ".join(profiles) or "none in loopd.toml"
            raise LoopNotWritten(
                f"--agent {asked}: no agent profile {asked!r} (profiles: {known}); add "
                f"[agents.{asked}] to loopd.toml, or name an adapter such as qwen or claude"
            )
        return Found(value=asked, source="--agent")
    if len(profiles) == 1:
        return Found(value=profiles[0], source="the only agent profile of loopd.toml")
    if profiles:
        others = ", ".join(profiles[1:])
        return Found(
            value=profiles[0],
            source=f"the first agent profile of loopd.toml (others: {others}; --agent NAME)",
        )
    default = str(LoopConfig.model_fields["agent"].default)
    return Found(
        value=default,
        source="loopd's default adapter: loopd.toml has no [agents.NAME] (--agent NAME)",
    )


def chosen_checks(checks: list[Found]) -> list[Found]:
    """The checks done_when gets: every one given with --check, else the first guessed."""
    given = [c for c in checks if c.source == "--check"]
    return given or checks[:1]


def _toml(value: str | list[str]) -> str:
    """A TOML string, or an array of them on one line (tomli_w's escapes)."""
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return tomli_w.dumps({"v": value}).removeprefix("v = ").rstrip("\n")


def _comment(text: str) -> str:
    """A comment of one or more lines, each under COMMENT_WIDTH."""
    return textwrap.fill(
        " ".join(text.split()),
        width=COMMENT_WIDTH,
        initial_indent="# ",
        subsequent_indent="# ",
        break_on_hyphens=False,
        break_long_words=False,
    )


def loop_text(name: str, guess: Guess, agent: Found, task: str, command_line: str) -> str:
    """The commented loop file; its guesses under comments naming their sources."""
    chosen = chosen_checks(guess.checks)
    lines = [
        f"# loops/{name}.toml: written by `{command_line}`.",
        "# Each guessed key says where it came from: read them, change what is wrong, then",
        "# `loopd check --run-checks` (it runs the checks on the base, as a run does first).",
        "enabled = true",
        _comment(
            "the repository's top folder; a run starts from its HEAD"
            + (f" (now {guess.branch})" if guess.branch else "")
        ),
        f"repo = {_toml(str(guess.repo))}",
        _comment("what the agent should do: say what you want done (--task)"),
        f"task = {_toml(task)}",
        _comment(f"who does it: {agent.source}"),
        f"agent = {_toml(agent.value)}",
        "# When to run (none yet: `loopd once " + name + "` runs it now):",
        '# schedule = ["0 2 * * *"]        # five-field cron; timezone = "Europe/Berlin"',
        f"# on_push = [{_toml(guess.branch or 'main')}]   # branches whose pushes start a run;"
        f" `loopd hooks install {name}`",
        '# land = "branch"                 # keep the branch for review | "merge" | "push"',
        _comment(f"the checks, all must exit 0: from {chosen[0].source}"),
        f"done_when = {_toml([c.value for c in chosen])}",
    ]
    for other in guess.checks[len(chosen) :]:
        lines.append(_comment(f"also found: {_toml(other.value)}, from {other.source}"))
    if guess.setup:
        lines.append(
            _comment("in each run's fresh clone, before the checks: from " + _sources(guess.setup))
        )
        lines.append(f"setup = {_toml([s.value for s in guess.setup])}")
    if guess.protect:
        lines.append(_comment("the agent may not change these: from " + _sources(guess.protect)))
        lines.append(f"protect = {_toml([p.value for p in guess.protect])}")
    else:
        lines.append(
            '# protect = ["tests/**"]          # no test folder found: the agent may edit any file'
        )
    if guess.venv is not None:
        lines.append(
            _comment(
                f"the checks' and agent's python3 and pytest first from {guess.venv.source}, "
                "never loopd's own"
            )
        )
        path = f"{guess.venv.value}:{{PATH}}"
        lines.append(f"env = {{ PATH = {_toml(path)} }}")
    return "\n".join(lines) + "\n"


def _sources(found: Iterable[Found]) -> str:
    return "; ".join(f.source for f in found)


def write_loop(loops_dir: Path, name: str, text: str, force: bool) -> Path:
    """Write loops/NAME.toml; an existing file is left as it is unless `force`."""
    path = loops_dir / f"{name}.toml"
    loops_dir.mkdir(parents=True, exist_ok=True)
    if force:
        write_atomic(path, text)
        return path
    # Written whole beside it, then linked in: a daemon watching loops/ never reads a part,
    # and a file made meanwhile is not replaced (link fails where the name exists).
    draft = loops_dir / f".{name}.toml.new"
    write_atomic(draft, text)
    try:
        os.link(draft, path)
    except FileExistsError:
        raise LoopNotWritten(exists(path)) from None
    finally:
        draft.unlink(missing_ok=True)
    return path


def exists(path: Path) -> str:
    """What to do about a loop file that is there already."""
    return (
        f"{path} exists already and is left as it is: choose another NAME, edit that file, "
        "or pass --force to write it again from the repository"
    )
