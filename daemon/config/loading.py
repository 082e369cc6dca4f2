"""Reading a home: loopd.toml and every loop file, validated, with explained errors."""

from __future__ import annotations

import os
import shutil
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from daemon.config.engine import EngineConfig, engine_warnings
from daemon.config.errors import ConfigError, did_you_mean, explain
from daemon.config.home_file import (
    BUILTIN_PROFILES,
    AgentProfile,
    DaemonConfig,
    LimitsConfig,
    RulesConfig,
    VerifierConfig,
)
from daemon.config.land import check_run_ends
from daemon.config.loop_file import LOOP_NAME, LOOP_NAME_MAX, Loop, LoopConfig
from daemon.config.notify import NotifyConfig
from daemon.config.sandbox import SandboxConfig
from daemon.config.telemetry import telemetry_warnings
from daemon.plugins import (
    AGENTS,
    GUIDE,
    PluginError,
    forget,
    installed_here,
    is_installed,
    is_own,
    load,
    names,
)
from daemon.regularfile import CONFIG_MAX, NotRegular, read_regular

# Repositories loopd makes itself before the first run that needs them, by name: whether a
# loop's (resolved) repository is one. A layer above registers them (daemon/example), so a
# loop may name one that does not exist yet.
PREPARED_REPOS: dict[str, Callable[[Path], bool]] = {}


def register_prepared_repo(name: str, is_it: Callable[[Path], bool]) -> None:
    """Accept a loop's repository that `is_it` names before it exists: loopd prepares it."""
    PREPARED_REPOS[name] = is_it


def _prepared_on_start(repo: Path) -> bool:
    return any(is_it(repo) for is_it in PREPARED_REPOS.values())


@dataclass
class LoadedConfig:
    """Everything read from a home: the daemon config, the valid loops, and every error."""

    daemon: DaemonConfig
    loops: dict[str, Loop] = field(default_factory=dict)
    errors: list[ConfigError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the start found right (the verifier)
    daemon_ok: bool = True
    # Problems of loop files that say `enabled = false` but do not load: warnings, not errors.
    disabled_errors: list[ConfigError] = field(default_factory=list)
    # Loop files left unjudged because loopd.toml did not load: judged against defaults they
    # would only gather false errors (a remote, a profile, a verifier that loopd.toml names).
    unchecked: list[str] = field(default_factory=list)


def _section_keys(model: type[BaseModel], where: str) -> dict[str, str]:
    return {name: where for name in model.model_fields}


def _daemon_keys() -> dict[str, str]:
    """Where each loopd.toml key lives, for a key written into the wrong file or section."""
    out: dict[str, str] = {}
    for section, model in (
        ("verifier", VerifierConfig),
        ("notify", NotifyConfig),
        ("limits", LimitsConfig),
        ("rules", RulesConfig),
        ("engine", EngineConfig),
        ("sandbox", SandboxConfig),
    ):
        out.update(_section_keys(model, f"in loopd.toml under [{section}]"))
    return out


def _elsewhere(model: type[BaseModel]) -> dict[str, str]:
    if model is LoopConfig:
        return _daemon_keys()
    loop_keys = _section_keys(LoopConfig, "in a loop file, loops/NAME.toml")
    return {**loop_keys, **_daemon_keys()}


def _errors_from_validation(
    path: Path, model: type[BaseModel], exc: ValidationError
) -> list[ConfigError]:
    return [
        ConfigError(path, p.key, p.message, p.fix) for p in explain(model, exc, _elsewhere(model))
    ]


def _read_toml(path: Path, home: Path) -> tuple[dict[str, Any] | None, list[ConfigError]]:
    try:
        # A FIFO or a link to /dev/zero must not hang the read: regular files of the home.
        return tomllib.loads(read_regular(path, within=home, cap=CONFIG_MAX).decode()), []
    except NotRegular as exc:
        return None, [ConfigError(path, "", exc.reason, "make it a TOML file of the home")]
    except tomllib.TOMLDecodeError as exc:
        return None, [
            ConfigError(
                path,
                "",
                f"TOML syntax error: {exc}",
                "correct the line named: strings in double quotes, lists in [ ], one "
                'key = value a line, e.g. max_attempts = 3 or done_when = ["pytest -q"]',
            )
        ]
    except UnicodeDecodeError as exc:
        return None, [
            ConfigError(
                path,
                "",
                f"not UTF-8 text (byte {exc.start})",
                "save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)",
            )
        ]
    except OSError as exc:
        return None, [
            ConfigError(
                path,
                "",
                f"cannot read: {exc.strerror}",
                f"make it a readable file for this user (`chmod u+r {path}`)",
            )
        ]


def load_daemon_config(path: Path) -> tuple[DaemonConfig | None, list[ConfigError]]:
    """Read `loopd.toml`; a missing file means every default."""
    if not path.exists():
        return DaemonConfig(), []
    data, errors = _read_toml(path, path.parent)
    if data is None:
        return None, errors
    try:
        return DaemonConfig.model_validate(data), []
    except ValidationError as exc:
        return None, _errors_from_validation(path, DaemonConfig, exc)


def _git_dir_exists(repo: Path) -> bool:
    return (repo / ".git").exists() or (repo / "HEAD").is_file() and (repo / "objects").is_dir()


def check_loop_name(name: str, path: Path) -> list[ConfigError]:
    """The loop's name must fit in git branches and run ids."""
    if not LOOP_NAME.match(name):
        return [
            ConfigError(
                path,
                "",
                f"loop name {name!r} has characters git branches and run ids cannot hold",
                "rename the file using letters, digits, '-', '_' and '.'",
            )
        ]
    if len(name) > LOOP_NAME_MAX:
        return [
            ConfigError(
                path,
                "",
                f"loop name {name!r} is {len(name)} characters long; at most {LOOP_NAME_MAX} "
                "(it is part of every RUN_ID and branch name)",
                f"rename the file to a name of at most {LOOP_NAME_MAX} characters, "
                f"e.g. {name[:LOOP_NAME_MAX].rstrip('-_.')}.toml",
            )
        ]
    return []


def _check_repo(path: Path, config: LoopConfig, daemon: DaemonConfig) -> list[ConfigError]:
    """The repository exists and is git's; in place only where attempts run here."""
    errors = []
    repo = config.repo_path
    if _prepared_on_start(repo) and not (repo / ".git").exists():
        pass  # loopd makes it before the first run that needs it (the example's)
    elif not repo.exists():
        errors.append(
            ConfigError(
                path,
                "repo",
                f"{repo} does not exist",
                'set repo to the path of a git repository, e.g. repo = "~/src/app" (a relative '
                "path is relative to the home)",
            )
        )
    elif not repo.is_dir() or not _git_dir_exists(repo):
        errors.append(
            ConfigError(
                path,
                "repo",
                f"{repo} is not a git repository",
                f"run `git init {repo}`, or set repo to the path of a git repository",
            )
        )
    if daemon.engine.temporal and config.isolation == "in-place":
        errors.append(
            ConfigError(
                path,
                "isolation",
                'isolation = "in-place" works on this machine\'s checkout, and with [engine] '
                'kind = "temporal" attempts run on whichever worker takes them',
                'use isolation = "clone" (the default) or "worktree" (each attempt\'s commit goes '
                "to [engine] remote)",
            )
        )
    return errors


def _check_agent(path: Path, config: LoopConfig, daemon: DaemonConfig) -> list[ConfigError]:
    """The loop's agent names a profile that can start."""
    profile = daemon.profile(config.agent)
    if profile is None:
        adapters = set(names(AGENTS)) - {"command"}
        known = sorted(set(daemon.agents) | adapters | set(BUILTIN_PROFILES))
        guess = did_you_mean(config.agent, known)
        return [
            ConfigError(
                path,
                "agent",
                f"no agent profile {config.agent!r}",
                (f"did you mean {guess!r}? " if guess else "")
                + f"add [agents.{config.agent}] to loopd.toml or use one of: "
                + ", ".join(known),
            )
        ]
    problem = _adapter_problem(path, config, profile, daemon)
    if problem is not None:
        return [problem]
    if profile.adapter == "command" and not profile.command:
        return [
            ConfigError(
                path,
                "agent",
                f"profile {config.agent!r} uses adapter 'command' without a command",
                f'set command = ["my-agent", "{{prompt}}"] under [agents.{config.agent}]',
            )
        ]
    return []


def _adapter_problem(
    path: Path, config: LoopConfig, profile: AgentProfile, daemon: DaemonConfig
) -> ConfigError | None:
    """The profile's adapter is installed and, when a plugin's, imports as an adapter class:
    a plugin that cannot be used refuses only the loops that use it."""
    if config.agent in daemon.agents:
        where, key = path.parent.parent / "loopd.toml", f"agents.{config.agent}.adapter"
    else:
        where, key = path, "agent"
    if not is_installed(AGENTS, profile.adapter):
        return ConfigError(
            where,
            key,
            f"no agent adapter {profile.adapter!r} is installed (installed: "
            + ", ".join(names(AGENTS))
            + ")",
            f"install the package that registers {profile.adapter!r} in the {AGENTS!r} "
            f"entry-point group into loopd's environment ({installed_here()}), or use one of "
            f"the installed names ({GUIDE})",
        )
    if is_own(AGENTS, profile.adapter):
        return None  # loopd's own: imported when a run starts, never at load
    try:
        load(AGENTS, profile.adapter)
    except PluginError as exc:
        message, _, fix = str(exc).partition(". Fix: ")
        return ConfigError(where, key, message, fix or f"see {GUIDE}")
    return None


def check_loop(
    name: str, path: Path, config: LoopConfig, daemon: DaemonConfig
) -> list[ConfigError]:
    """Checks that need more than one file or the disk: repository, agent profile."""
    errors = check_loop_name(name, path)
    errors += _check_repo(path, config, daemon)
    errors += _check_remote(path, config, daemon)
    errors += _check_agent(path, config, daemon)
    return errors + check_run_ends(path, config)


def _check_remote(path: Path, config: LoopConfig, daemon: DaemonConfig) -> list[ConfigError]:
    """`hosted` names a [remotes.NAME] of loopd.toml; `on_remote_push` and `poll` need it."""
    if config.hosted and config.hosted not in daemon.remotes:
        guess = did_you_mean(config.hosted, sorted(daemon.remotes))
        return [
            ConfigError(
                path,
                "hosted",
                f"no [remotes.{config.hosted}] in loopd.toml",
                (f"did you mean {guess!r}? " if guess else "")
                + f"add [remotes.{config.hosted}] with kind, repository and clone_url "
                "to loopd.toml (docs/configuration.md#remotesname)",
            )
        ]
    if (config.on_remote_push or config.poll.total_seconds()) and not config.hosted:
        return [
            ConfigError(
                path,
                "hosted",
                "on_remote_push and poll need the hosted repository they watch",
                'name a [remotes.NAME] of loopd.toml: hosted = "NAME"',
            )
        ]
    return []


def load_loop(path: Path, daemon: DaemonConfig) -> tuple[Loop | None, list[ConfigError]]:
    """Read one loop file; a broken file yields errors and no loop."""
    data, errors = _read_toml(path, path.parent.parent)
    if data is None:
        return None, errors
    try:
        config = LoopConfig.model_validate(data)
    except ValidationError as exc:
        return None, _errors_from_validation(path, LoopConfig, exc)
    repo = Path(os.path.expanduser(config.repo))
    if not repo.is_absolute():
        # A relative repo is relative to the home, not to wherever loopd was started.
        repo = path.parent.parent / repo
    config = config.model_copy(update={"repo": str(repo.resolve())})
    errors = check_loop(path.stem, path, config, daemon)
    if not config.enabled:
        # A disabled loop never runs unasked: its problems are warnings, and `loopd once
        # --force` refuses it with the same messages when it matters.
        loop = Loop(name=path.stem, path=path, config=config, problems=errors)
        loop.notes = [f"{e} (the loop is disabled)" for e in errors]
        return loop, []
    if errors:
        return None, errors
    loop = Loop(name=path.stem, path=path, config=config)
    program = _agent_program(daemon.profile(config.agent))
    if config.enabled and program and not _findable(program):
        loop.notes.append(
            f"{path}: agent: {program!r} is not on PATH here; install it, or check the PATH "
            "loopd runs with (the systemd unit sets its own)"
        )
    return loop, []


def _says_disabled(path: Path) -> bool:
    """Whether a loop file that does not load says `enabled = false`."""
    try:
        raw = read_regular(path, within=path.parent.parent, cap=CONFIG_MAX)
        return tomllib.loads(raw.decode()).get("enabled") is False
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        return False


def _agent_program(profile: AgentProfile | None) -> str:
    """The program a profile starts: the command's first word, else the adapter's CLI."""
    if profile is None:
        return ""
    if profile.adapter == "command":
        return profile.command[0] if profile.command else ""
    # A plugin's program need not carry its adapter's name; `check` lists the one it starts.
    return profile.adapter if is_own(AGENTS, profile.adapter) else ""


def _findable(program: str) -> bool:
    if "/" in program:
        return os.access(os.path.expanduser(program), os.X_OK)
    return shutil.which(program) is not None


def load_home(home: Path) -> LoadedConfig:
    """Read `loopd.toml` and every `loops/*.toml`; broken loops are left out and reported."""
    forget()  # the installed plugins, read again when a loop names one
    daemon, errors = load_daemon_config(home / "loopd.toml")
    loaded = LoadedConfig(daemon=daemon or DaemonConfig(), errors=list(errors))
    loaded.daemon_ok = daemon is not None
    loops_dir = home / "loops"
    paths = sorted(loops_dir.glob("*.toml")) if loops_dir.is_dir() else []
    if not loaded.daemon_ok:
        # One error, once: the loops are judged when loopd.toml loads.
        loaded.unchecked = [path.stem for path in paths]
        return loaded
    for path in paths:
        loop, loop_errors = load_loop(path, loaded.daemon)
        if loop_errors and _says_disabled(path):
            loaded.disabled_errors.extend(loop_errors)
            loaded.warnings.extend(f"{e} (the loop is disabled)" for e in loop_errors)
            loop_errors = []
        loaded.errors.extend(loop_errors)
        if loop is not None:
            loaded.loops[loop.name] = loop
            loaded.warnings.extend(loop.notes)
    if not loaded.daemon.verifier.configured:
        for loop in loaded.loops.values():
            if loop.config.enabled and loop.config.critic == "on":
                loaded.warnings.append(
                    f'loop {loop.name!r}: critic = "on" but loopd.toml has no [verifier] '
                    "base_url, so attempts are judged by their checks alone; configure "
                    '[verifier] or set critic = "off" in the loop file'
                )
    loaded.warnings.extend(engine_warnings(home, loaded.daemon.engine))
    loaded.warnings.extend(telemetry_warnings(loaded.daemon.telemetry))
    if loaded.daemon.verifier.configured:
        for loop in loaded.loops.values():
            profile = loaded.daemon.profile(loop.config.agent)
            if profile and profile.model and profile.model == loaded.daemon.verifier.model:
                loaded.warnings.append(
                    f"loop {loop.name!r}: the critic's model {profile.model!r} is the agent's "
                    "model; a separate model judges more independently"
                )
    return loaded
