"""`loopd init` and `loopd check`: make a home, validate its configuration."""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path
from typing import Any

from daemon.calibration.field import field_warning
from daemon.calibration.warnings import calibration_warnings
from daemon.cli.common import CommandError, daemon_pid, home_of
from daemon.cli.jsonout import print_json
from daemon.cli.loopchecks import own_venv_warnings, run_loop_checks
from daemon.cli.newloop import loop_name_of, make_loop
from daemon.cli.statusview import land_held_line
from daemon.clock import utc_now
from daemon.config import LoadedConfig
from daemon.config.errors import ConfigError
from daemon.config.home_file import DaemonConfig
from daemon.config.land import known_target
from daemon.config.secrets import missing_from_env_file
from daemon.engine import missing_extra
from daemon.home import Home, init_home, is_home
from daemon.model.probe import Probe
from daemon.plain.overlap import overlap_line, overlaps
from daemon.runparts.exposure import FIX, agent_program, describe, loop_programs
from daemon.runs.budget import budget_warnings
from daemon.sandbox.limits import describe as describe_limits
from daemon.sandbox.limits import run_limits
from daemon.sandbox.paths import home_folders
from daemon.sandbox.programs import resolve_program, shown
from daemon.sandbox.registry import Choice, choose
from daemon.service.preflight import Preflight, daemon_path
from daemon.state.calibration import UnreadableFile, load_field
from daemon.state.landholds import load_land_holds


def init(args: argparse.Namespace) -> int:
    """Make a home with commented examples."""
    target = Path(args.dir or ".").expanduser().resolve()
    existing = is_home(target)
    written = init_home(target)
    for path in written:
        print(f"wrote {path}")
    if existing:
        print(f"{target} is a home already: its loopd.toml and loops/ are left as they are")
    else:
        print(
            f"home ready at {target}: `loopd --home {target} run` runs the example once and "
            "says what it did"
        )
    if getattr(args, "repo", None):
        name = args.name or loop_name_of(Path(args.repo))
        return make_loop(Home(target), args, name)
    if not existing:
        print(
            f"your own repository: `loopd --home {target} new NAME --repo PATH` writes "
            "loops/NAME.toml from it (its test command, its test folders) and tries its checks"
        )
    return 0


def _check_engine(home: Home, loaded: LoadedConfig) -> None:
    """The engine's extra installed, and a Temporal engine's schedules: errors and warnings
    added to `loaded`."""

    kind = loaded.daemon.engine.kind if loaded.daemon_ok else "local"
    needs = missing_extra(kind)
    if needs:
        problem, install = f'"{kind}" needs {needs[0]}', f'{needs[1]}, or kind = "local"'
        loaded.errors.append(ConfigError(home.config_path, "engine.kind", problem, install))
    elif loaded.daemon_ok and loaded.daemon.engine.temporal:
        from daemon.engine.temporal.check import check_schedules

        errors, warnings = check_schedules(home, loaded)
        loaded.errors.extend(errors)
        loaded.warnings.extend(warnings)


def _print_check_json(
    home: Home,
    loaded: LoadedConfig,
    warnings: list[str],
    probe: Probe | None,
    sandbox: Choice,
    shows: dict[str, list[str]],
    limits: str,
    agents: dict[str, dict[str, str]],
    logins: list[dict[str, Any]],
) -> None:
    print_json(
        {
            "home": str(home.root),
            "loops": sorted(loaded.loops),
            "loops_unchecked": loaded.unchecked,
            "errors": [
                {"file": str(e.file), "key": e.key, "message": e.message, "fix": e.fix}
                for e in loaded.errors
            ],
            "warnings": warnings,
            "verifier": probe.model_dump() if probe is not None else None,
            "sandbox": {
                "mode": sandbox.mode,
                "in_force": "none" if sandbox.refusal else sandbox.name,
                "detail": sandbox.detail,
                "summary": sandbox.summary(),
                "shows": shows,
            },
            "limits": limits,
            "agents": agents,
            "logins": logins,
        }
    )


def critic_line(loaded: LoadedConfig) -> str:
    """What judges the attempts of `critic = "auto"` loops, said once here (not a warning on
    every command): the verifier's model, or their checks alone."""
    auto = sorted(
        name
        for name, loop in loaded.loops.items()
        if loop.config.enabled and loop.config.critic == "auto"
    )
    if not auto or not loaded.daemon_ok:
        return ""
    verifier = loaded.daemon.verifier
    if verifier.configured:
        return f"critic: the verifier's model judges the attempts of {', '.join(auto)} (auto)"
    return (
        f"critic: attempts of {', '.join(auto)} are judged by their checks alone (auto: no "
        "[verifier] in loopd.toml; add one to have a model judge them)"
    )


def _print_check_text(
    loaded: LoadedConfig,
    notes: list[str],
    probe: Probe | None,
    sandbox: Choice,
    shows: dict[str, list[str]],
    limits: str,
    agents: dict[str, dict[str, str]],
    logins: list[dict[str, Any]],
) -> None:
    for error in loaded.errors:
        print(f"error: {error}")
    for warning in notes:
        print(f"warning: {warning}")
    if probe is not None and probe.ok:
        print(probe.text)
    loud = sandbox.warning or sandbox.refusal
    print(f"warning: {sandbox.summary()}" if loud else sandbox.summary())
    if limits:
        print(limits)
    judged = critic_line(loaded)
    if judged:
        print(judged)
    for name, lines in sorted(shows.items()):
        if lines:
            print(f"  {name}: the sandbox also shows, read-only, of what it hides:")
            for line in lines:
                print(f"    {line}")
    for name, agent in sorted(agents.items()):
        print(f"  {name}: agent {agent['line']}")
    for login in logins:
        print(login["line"] if login["works"] else f"warning: {login['line']}")
    names = ", ".join(sorted(loaded.loops)) or "none"
    counted = f"{len(loaded.errors)} error(s), {len(loaded.warnings)} warning(s)"
    if loaded.unchecked:
        unchecked = ", ".join(loaded.unchecked)
        print(f"loop files not checked until loopd.toml loads: {unchecked}; {counted}")
    else:
        print(f"{len(loaded.loops)} valid loop(s): {names}; {counted}")


def check(args: argparse.Namespace) -> int:
    """Validate loopd.toml and loops/*.toml."""

    home = home_of(args)
    loaded = home.load()
    loaded.warnings.extend(budget_warnings(loaded))
    _check_engine(home, loaded)
    pid = daemon_pid(home)
    preflight = Preflight(loaded, home.config_path, pid)
    loaded.warnings.extend(preflight.run())
    if loaded.daemon_ok:
        config = loaded.daemon
        loaded.warnings.extend(calibration_warnings(home.state_dir, config, home.config_path))
        loaded.warnings.extend(_land_held(home, loaded))
        loaded.warnings.extend(_field_warnings(home))
        loaded.warnings.extend(_overlap_warnings(home, loaded))
        if getattr(args, "env_file", ""):
            loaded.warnings.extend(missing_from_env_file(loaded, Path(args.env_file)))
    probe = preflight.probe  # the verifier tried: what answered, or the warning says
    sandbox = choose(loaded.daemon.sandbox)
    shows: dict[str, list[str]] = {}
    limits = ""
    if loaded.daemon_ok:
        limits = describe_limits(run_limits(loaded.daemon.limits))
    if loaded.daemon_ok and not sandbox.refusal and sandbox.name != "off":
        shows = _sandbox_shows(loaded, daemon_path(pid)[0])
    for _name, loop in sorted(loaded.loops.items()):
        if loop.config.enabled:
            loaded.warnings.extend(own_venv_warnings(loop, daemon_path(pid)[0]))
    if getattr(args, "run_checks", False) and loaded.daemon_ok and not sandbox.refusal:
        _run_checks(home, loaded)
    notes = loaded.warnings + _inside_home(home.root, loaded.daemon)
    warnings = [w for w in (sandbox.warning, sandbox.refusal) if w] + notes
    agents = _agent_programs(loaded, daemon_path(pid)[0]) if loaded.daemon_ok else {}
    logins = _held_logins(home, loaded) if loaded.daemon_ok else []
    if args.json:
        _print_check_json(home, loaded, warnings, probe, sandbox, shows, limits, agents, logins)
    else:
        _print_check_text(loaded, notes, probe, sandbox, shows, limits, agents, logins)
    return 2 if loaded.errors else 0


def _land_held(home: Home, loaded: LoadedConfig) -> list[str]:
    """A warning per loop held at `land = "branch"` by reverted landings (state/landholds.py)."""
    if not (home.state_dir / "land-holds.toml").is_file():
        return []
    holds = load_land_holds(home.state(loaded.daemon.limits.events_rotate))
    return [
        land_held_line(name, hold.model_dump(mode="json")) for name, hold in holds.loops.items()
    ]


def _overlap_warnings(home: Home, loaded: LoadedConfig) -> list[str]:
    """Loops landing on one target whose recent runs changed the same files (plain/overlap.py)."""
    loops = {
        name: {
            "enabled": loop.config.enabled,
            "repo": str(loop.config.repo_path),
            "target": known_target(loop.config),
        }
        for name, loop in loaded.loops.items()
    }
    return [overlap_line(o) for o in overlaps(home.state_dir, loops, utc_now())]


def _field_warnings(home: Home) -> list[str]:
    """The judge's field false-pass rate above `max_false_pass` (daemon/calibration/field.py)."""
    try:
        warning = field_warning(load_field(home.state_dir))
    except UnreadableFile as exc:
        return [f"{exc}; `loopd calibrate --field` measures it again"]
    return [warning] if warning else []


VERSION_TIMEOUT = 10.0  # seconds `PROGRAM --version` may take


def _agent_programs(loaded: Any, search_path: str) -> dict[str, dict[str, str]]:
    """Per enabled loop: its agent's program as the sandbox finds it (on the daemon's PATH,
    through links and `#!` lines), and what `PROGRAM --version` says."""
    out: dict[str, dict[str, str]] = {}
    homes = home_folders(os.environ)
    for name, loop in sorted(loaded.loops.items()):
        if not loop.config.enabled:
            continue
        program = agent_program(loop.config, loaded.daemon)
        if not program:
            continue
        resolved = resolve_program(program, search_path, homes, ())
        found = str(resolved.found) if resolved.found is not None else ""
        profile = loaded.daemon.profile(loop.config.agent)
        # A `command` agent's program may be the agent itself, which might take --version
        # for a task: it is not asked.
        asked = found and profile is not None and profile.adapter != "command"
        version = _version(found) if asked else ""
        if not found:
            line = f"{program!r} not found on the daemon's PATH"
        else:
            line = f"{shown(found)}" + (f" ({version})" if version else "")
        out[name] = {"program": program, "found": found, "version": version, "line": line}
    return out


def _version(program: str) -> str:
    """The first line `PROGRAM --version` prints, within VERSION_TIMEOUT; "" if none."""
    try:
        done = subprocess.run(
            [program, "--version"],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = [line.strip() for line in (done.stdout or done.stderr).splitlines() if line.strip()]
    return lines[0][:100] if done.returncode == 0 and lines else ""


def _held_logins(home: Home, loaded: LoadedConfig) -> list[dict[str, Any]]:
    """Each agent profile held for a refused login, tried once (runs/logincheck.py): lifted
    when its login works again."""
    if not (home.state_dir / "logins.toml").is_file():
        return []  # nothing held; and `check` makes no state/ folders in a home
    from daemon.runs.logincheck import check_logins

    store = home.state(loaded.daemon.limits.events_rotate)
    out = []
    for lifted in check_logins(store, loaded.daemon, home.root, utc_now()):
        profile, tried = lifted.profile, lifted.tried
        if tried.works:
            line = f"agent profile {profile!r}: its login works again; its loops run again"
            if lifted.escalation:
                line += f"; escalation {lifted.escalation} resolved"
        else:
            line = f"agent profile {profile!r} stays held (its loops wait): {tried.said}"
        out.append({"profile": profile, "works": tried.works, "said": tried.said, "line": line})
    return out


def _sandbox_shows(loaded: Any, search_path: str) -> dict[str, list[str]]:
    """Per enabled loop, the folders of hidden places its programs need, and why; a program
    that lies in a place of the deny list becomes an error of its loop's file."""
    out: dict[str, list[str]] = {}
    for name, loop in sorted(loaded.loops.items()):
        if not loop.config.enabled:
            continue
        started = loop_programs(loop.config, loaded.daemon, search_path, os.environ)
        for item in started:
            resolved = item.resolved
            if resolved.problem and resolved.found is not None:
                message = f"{resolved.program!r} cannot run in the sandbox: {resolved.problem}"
                loaded.errors.append(ConfigError(loop.path, item.key, message, FIX[5:]))
        out[name] = describe(started)
    return out


def _run_checks(home: Home, loaded: LoadedConfig) -> None:
    """Each enabled loop's checks on its base, in its sandbox: environment failures are
    errors of the loop's file (said on stderr as they run: they take a while)."""
    for name, loop in sorted(loaded.loops.items()):
        if loop.config.enabled and loop.config.done_when:
            run_loop_checks(home, loaded, name, loop)


def _inside_home(root: Path, config: DaemonConfig) -> list[str]:
    """`[sandbox]` paths and the worktrees folder in the home, which agents never see."""
    out = []
    home = os.path.realpath(root)
    for key in ("writable", "readable"):
        for path in getattr(config.sandbox, key):
            real = os.path.realpath(os.path.expanduser(path))
            if real == home or real.startswith(home + "/"):
                out.append(
                    f"{root / 'loopd.toml'}: [sandbox] {key}: {path} is inside the home, "
                    "which agents and checks never see; name a folder outside it"
                )
    trees = os.path.realpath(config.limits.worktrees_path)
    if config.sandbox.mode != "off" and (trees == home or trees.startswith(home + "/")):
        out.append(
            f"{root / 'loopd.toml'}: [limits] worktrees: {config.limits.worktrees} is inside "
            "the home, which the sandbox hides from agents: runs end as `error`; set it to a "
            'folder outside the home (the default is "~/.cache/loopd/worktrees")'
        )
    return out


__all__ = ["CommandError"]
