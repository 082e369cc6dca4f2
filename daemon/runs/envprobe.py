"""Whether the checks fail for the environment's sake, not the code's, before any agent runs.

The checks run once on the base before the first attempt (the `skip_if_done` check, whose
run this reuses). A check whose failure is the environment's ends the run at once with cause
`environment`, naming the program, the interpreter the sandbox resolved and the fix; no
agent is started and no nudge spent. Only failures no edit of the repository's files could
mend count, so a failing test never stops real work:

- an interpreter's `-m MODULE` that is not installed (`.../python3: No module named pytest`),
  said to be loopd's own venv when it is (a module a script imports is not: the agent may
  be meant to write it);
- a program looked up on the PATH that is not there (`sh: 1: pytest: not found`, exit 127);
  a path such as `./run.sh` is not: the agent may be meant to write it;
- permission denied on a path the sandbox hides (the deny list, loopd's home).

A check that fails the same environmental way after the agent's edits is runs/sameoutput.py's.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from daemon.agents.environment import loopd_venv
from daemon.config import LoopConfig
from daemon.runparts.checks import CheckResult, ChecksResult
from daemon.runparts.confinement import Confinement
from daemon.runparts.journal import RunJournal
from daemon.sandbox.commandline import programs

NO_MODULE = re.compile(r"^(?P<interp>\S+): No module named (?P<module>[\w.]+)\s*$", re.M)
NOT_FOUND = re.compile(r": (?P<program>[^\s/:]+): (?:command )?not found\s*$", re.M)
DENIED = re.compile(
    r"(?P<path>/[^\s:'\"]+)'?: Permission denied|Permission denied: '(?P<p2>/[^']+)'"
)
PATH_FIX = 'env = { PATH = "/path/to/venv/bin:{PATH}" }'


@dataclass(frozen=True)
class EnvironmentFailure:
    """One check that cannot run where loopd runs it."""

    key: str  # done_when[N]
    command: str
    program: str  # what was not found: a module, a program, a path
    interpreter: str  # the program the sandbox's PATH resolved ("" when none)
    why: str
    fix: str

    def reason(self) -> str:
        """The run's reason: the check, what is missing, what the sandbox resolved, the fix."""
        return f"{self.key} `{self.command}`: {self.why}. Fix: {self.fix}"


def base_failure(
    journal: RunJournal, tree: Path, cfg: LoopConfig, checks: ChecksResult
) -> EnvironmentFailure | None:
    """Whether the checks' run on the base failed for the environment, judged with the PATH
    and the hidden places of the run's sandbox."""
    if checks.passed:
        return None
    confinement = Confinement.for_run(journal.services, cfg, journal.run, tree)
    search_path = confinement.checks_env().get("PATH", "")
    exposure = confinement.exposure
    hidden = (*exposure.hidden, *exposure.denied) if confinement.sandbox.confines else ()
    return environment_failure(checks, search_path, hidden)


def environment_failure(
    checks: ChecksResult, search_path: str, hidden: tuple[Path, ...] = ()
) -> EnvironmentFailure | None:
    """The first check whose failure is the environment's (None: none is)."""
    found = environment_failures(checks, search_path, hidden)
    return found[0] if found else None


def environment_failures(
    checks: ChecksResult, search_path: str, hidden: tuple[Path, ...] = ()
) -> list[EnvironmentFailure]:
    """Each check whose failure is the environment's."""
    out = []
    for i, result in enumerate(checks.results):
        if result.passed or result.timed_out or result.command.startswith("setup: "):
            continue
        found = _classify(f"done_when[{i}]", result, search_path, hidden)
        if found is not None:
            out.append(found)
    return out


def resolved_program(command: str, search_path: str) -> str:
    """The first program of `command` as the checks' PATH resolves it ("" when not found)."""
    names = programs(command)
    if not names:
        return ""
    name = names[0]
    if "/" in name:
        return name if os.access(name, os.X_OK) else ""
    return shutil.which(name, path=search_path) or ""


def is_loopd_own(program: str) -> bool:
    """Whether `program` lies in loopd's own venv."""
    venv = loopd_venv()
    if venv is None or not program:
        return False
    return Path(os.path.abspath(program)).is_relative_to(venv) or Path(
        os.path.realpath(os.path.dirname(program))
    ).is_relative_to(venv)


def _classify(
    key: str, result: CheckResult, search_path: str, hidden: tuple[Path, ...]
) -> EnvironmentFailure | None:
    output, command = result.output, result.command
    interpreter = resolved_program(command, search_path)
    missing = NO_MODULE.search(output)
    if missing is not None and missing.group("interp").endswith(("Error", "Error:")):
        missing = None  # a traceback's line, not an interpreter's `-m`
    if missing is not None:
        module = missing.group("module")
        interp = missing.groupdict().get("interp") or interpreter
        whose = " (loopd's own venv, which is not your project's)" if is_loopd_own(interp) else ""
        return EnvironmentFailure(
            key,
            command,
            module,
            interp,
            f"module `{module}` not found by {interp}{whose}",
            f"install `{module}` for the interpreter your project uses and put its venv first "
            f"on the checks' PATH (`{PATH_FIX}` in the loop's file), or install it in `setup`",
        )
    absent = NOT_FOUND.search(output)
    if absent is not None and result.exit_code == 127:
        program = absent.group("program")
        return EnvironmentFailure(
            key,
            command,
            program,
            "",
            f"`{program}` is not on the checks' PATH ({search_path})",
            f"install `{program}`, or add its folder to the checks' PATH (`{PATH_FIX}` in the "
            "loop's file)",
        )
    return _denied(key, result, interpreter, hidden)


def _denied(
    key: str, result: CheckResult, interpreter: str, hidden: tuple[Path, ...]
) -> EnvironmentFailure | None:
    """Permission denied on a path the sandbox hides: a check that needs it cannot pass."""
    for match in DENIED.finditer(result.output):
        path = Path(match.group("path") or match.group("p2"))
        if any(path == h or path.is_relative_to(h) for h in hidden):
            return EnvironmentFailure(
                key,
                result.command,
                str(path),
                interpreter,
                f"permission denied on {path}, which the sandbox hides",
                "make the check read what it needs from the repository or a folder of "
                "`[sandbox] readable` outside the deny list (docs/sandbox.md)",
            )
    return None
