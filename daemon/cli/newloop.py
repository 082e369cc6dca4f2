"""`loopd new`: a loop file written from what a repository holds, its checks tried on its base."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

from daemon.cli.common import CommandError, daemon_pid, home_of
from daemon.cli.loopchecks import own_venv_warnings, run_loop_checks
from daemon.config import LOOP_NAME_MAX
from daemon.config.guess import Found, NotARepository, guess
from daemon.config.newloop import (
    DEFAULT_TASK,
    LoopNotWritten,
    choose_agent,
    chosen_checks,
    exists,
    loop_text,
    name_problems,
    write_loop,
)
from daemon.home import Home
from daemon.sandbox.registry import choose
from daemon.service.preflight import daemon_path

FIX = "use letters, digits, '-', '_' and '.', starting with a letter or digit, at most 32"
LOOKED_FOR = (
    "pyproject.toml, pytest.ini, setup.cfg, tox.ini, tests/test_*.py, package.json "
    "scripts.test, a Makefile's test: or check: target, go.mod, Cargo.toml, setup.py"
)


def new(args: argparse.Namespace) -> int:
    """Write loops/NAME.toml from what a repository holds, and try its checks."""
    home = home_of(args)
    return make_loop(home, args, args.name)


def make_loop(home: Home, args: argparse.Namespace, name: str) -> int:
    """The loop file for `args.repo` written as NAME, its checks probed unless --no-probe; the
    exit code (2: nothing written, or the checks cannot run where loopd runs them)."""
    path = home.loops_dir / f"{name}.toml"
    problems = name_problems(name, path)
    if problems:
        raise CommandError(f"{name!r} cannot name a loop: {problems[0].message}; {FIX}")
    if path.exists() and not getattr(args, "force", False):
        raise CommandError(exists(path))
    loaded = home.load()
    if not loaded.daemon_ok:
        said = "\n  ".join(str(e) for e in loaded.errors if e.file == home.config_path)
        raise CommandError(f"loopd.toml does not load; fix it first:\n  {said}")
    try:
        agent = choose_agent(loaded.daemon, args.agent or "")
        guessed = guess(Path(args.repo))
    except (LoopNotWritten, NotARepository) as exc:
        raise CommandError(f"{exc}; no loop file written") from None
    if args.check:
        given = [Found(value=command, source="--check") for command in args.check]
        guessed.checks = given + guessed.checks
    if not guessed.checks:
        raise CommandError(
            f"nothing in {guessed.repo} says how its tests run (looked at HEAD for {LOOKED_FOR})"
            "; no loop file written, since a loop without a check would pass whatever its agent "
            f"did. Name the check: `loopd new {name} --repo {guessed.repo} --check 'COMMAND'`"
        )
    text = loop_text(name, guessed, agent, args.task or DEFAULT_TASK, _command_line(args, name))
    try:
        written = write_loop(home.loops_dir, name, text, getattr(args, "force", False))
    except LoopNotWritten as exc:
        raise CommandError(str(exc)) from None
    print(f"wrote {written}")
    print(f"  repo: {guessed.repo}")
    chosen = chosen_checks(guessed.checks)
    print(f"  done_when: {', '.join(c.value for c in chosen)} (from {chosen[0].source})")
    if guessed.protect:
        print(f"  protect: {', '.join(p.value for p in guessed.protect)}")
    else:
        print("  protect: nothing (no test folder found; the agent may edit any file)")
    if guessed.venv is not None:
        print(f"  env: PATH starts with {guessed.venv.value} ({guessed.venv.source})")
    print(f"  agent: {agent.value} ({agent.source})")
    return _probe_and_next(home, name, written, args)


def _probe_and_next(home: Home, name: str, written: Path, args: argparse.Namespace) -> int:
    """The written loop loaded and its checks run on its base; what to run next."""
    loaded = home.load()
    if name not in loaded.loops:
        for error in loaded.errors + loaded.disabled_errors:
            if error.file == written:
                print(f"error: {error}")
        print(f"{written} was written but does not load: fix it as said, then `loopd check`")
        return 2
    loop = loaded.loops[name]
    search_path = daemon_path(daemon_pid(home))[0]  # the PATH a run's programs are found on
    for warning in own_venv_warnings(loop, search_path):
        print(f"warning: {warning}")
    home_arg = f"--home {shlex.quote(str(home.root))} "
    code = 0
    sandbox = choose(loaded.daemon.sandbox)
    if args.no_probe:
        print(
            f"the checks were not run (--no-probe): `loopd {home_arg}check --run-checks` runs them"
        )
    elif sandbox.refusal:
        print(f"warning: the checks were not run: {sandbox.refusal}")
    else:
        passed = run_loop_checks(home, loaded, name, loop)
        errors = [e for e in loaded.errors if e.file == written]
        for error in errors:
            print(f"error: {error}")
        if errors:
            print(
                f"the checks cannot run where loopd runs them: fix {written} as said, then "
                f"`loopd {home_arg}check --run-checks`"
            )
            code = 2
        elif passed == len(loop.config.done_when):
            print(
                "the checks pass on its base already: a run with this task would find nothing "
                "to do (loopd skips it with skip_if_done); give the loop a task of its own"
            )
        else:
            total = len(loop.config.done_when)
            print(
                f"the checks run in the sandbox: {passed} of {total} pass on its base; "
                "making the rest pass is the agent's work"
            )
    print("next:")
    print(f"  $EDITOR {written}   # the task, a schedule; each guess says where it came from")
    print(f"  loopd {home_arg}check --run-checks")
    print(f"  loopd {home_arg}once {name}   # one run now, in the foreground")
    print(f"  loopd {home_arg}run   # the daemon: runs it on the schedule or on_push you add")
    return code


def loop_name_of(repo: Path) -> str:
    """A loop name from a repository's folder name (`loopd init --repo`): what loop names may
    not hold becomes '-', cut to their length."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", repo.expanduser().resolve().name)
    name = name.lstrip("-_.")[:LOOP_NAME_MAX].rstrip("-_.")
    return name or "repo"


def _command_line(args: argparse.Namespace, name: str) -> str:
    """The command line as the loop file's first comment quotes it."""
    if args.func == "home:init":
        words = ["loopd", "init", str(args.dir or "."), "--repo", str(args.repo)]
        words += ["--name", name] if args.name else []
    else:
        words = ["loopd", "new", name, "--repo", str(args.repo)]
    if args.agent:
        words += ["--agent", args.agent]
    for command in args.check or []:
        words += ["--check", command]
    return shlex.join(words)
