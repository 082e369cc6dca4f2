"""Pydantic models of `loopd.toml` and `loops/*.toml`: load, validate, explain."""

from __future__ import annotations

import os
import re
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from daemon.units import Duration, Size

ADAPTERS = ("qwen", "claude", "codex", "aider", "opencode", "gemini", "command")
LOOP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class VerifierConfig(StrictModel):
    base_url: str = ""
    model: str = ""
    api_key_env: str = ""
    timeout: Duration = "60s"  # type: ignore[assignment]
    pending_limit: Duration = "6h"  # type: ignore[assignment]
    evidence_tokens: int = Field(12000, gt=0)
    judge_timeout: Duration = "800ms"  # type: ignore[assignment]
    judge_candidates: int = Field(40, ge=0)
    embeddings_model: str = ""

    @property
    def configured(self) -> bool:
        return bool(self.base_url)


class AgentProfile(StrictModel):
    adapter: Literal["qwen", "claude", "codex", "aider", "opencode", "gemini", "command"] = "qwen"
    model: str = ""
    base_url: str = ""
    api_key_env: str = ""
    args: list[str] = []
    env: dict[str, str] = {}
    command: list[str] = []

    @field_validator("command")
    @classmethod
    def _command_not_empty_strings(cls, value: list[str]) -> list[str]:
        if any(not part for part in value):
            raise ValueError("command holds an empty argument; remove it")
        return value


class NotifyConfig(StrictModel):
    command: list[str] = []
    webhook: str = ""


class LimitsConfig(StrictModel):
    max_concurrent_runs: int = Field(1, ge=1)
    retain_days: int = Field(30, ge=0)
    transcript_cap: Size = "50MB"  # type: ignore[assignment]
    prompt_cap: Size = "100KB"  # type: ignore[assignment]
    shutdown_grace: Duration = "30s"  # type: ignore[assignment]
    worktrees: str = "~/.cache/loopd/worktrees"
    events_rotate: Size = "64MB"  # type: ignore[assignment]

    @property
    def worktrees_path(self) -> Path:
        return Path(os.path.expanduser(self.worktrees))


class DaemonConfig(StrictModel):
    """`loopd.toml`."""

    verifier: VerifierConfig = VerifierConfig()
    agents: dict[str, AgentProfile] = {}
    notify: NotifyConfig = NotifyConfig()
    limits: LimitsConfig = LimitsConfig()

    def profile(self, name: str) -> AgentProfile | None:
        """The named profile; an adapter's own name works without a profile."""
        if name in self.agents:
            return self.agents[name]
        if name in ADAPTERS and name != "command":
            return AgentProfile(adapter=name)  # type: ignore[arg-type]
        return None


class LoopConfig(StrictModel):
    """`loops/NAME.toml`."""

    repo: str
    task: str
    agent: str = "qwen"
    enabled: bool = True
    schedule: list[str] = []
    timezone: str = "UTC"
    catch_up: Duration = "1h"  # type: ignore[assignment]
    on_push: list[str] = []
    on_change: list[str] = []
    debounce: Duration = "10s"  # type: ignore[assignment]
    overlap: Literal["coalesce", "skip", "queue"] = "coalesce"
    max_queued: int = Field(10, ge=1)
    isolation: Literal["worktree", "in-place"] = "worktree"
    base: str = "HEAD"
    done_when: list[str] = []
    check_timeout: Duration = "10m"  # type: ignore[assignment]
    protect: list[str] = []
    max_attempts: int = Field(3, ge=1)
    attempt_timeout: Duration = "45m"  # type: ignore[assignment]
    stall_after: Duration = "5m"  # type: ignore[assignment]
    max_nudges: int = Field(2, ge=0)
    nudge: str = "Continue the task. If something blocks you, say exactly what."
    max_tokens: int = Field(0, ge=0)
    critic: Literal["on", "off"] = "on"
    critic_threshold: int = Field(7, ge=0, le=10)
    notify_on: list[Literal["escalated", "succeeded", "failed-attempt"]] = ["escalated"]

    @field_validator("task")
    @classmethod
    def _task_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("task is empty; say what the agent should do")
        return value

    @field_validator("schedule")
    @classmethod
    def _valid_cron(cls, value: list[str]) -> list[str]:
        from daemon.scheduling.cron import CronExpression

        for expression in value:
            CronExpression.parse(expression)
        return value

    @field_validator("timezone")
    @classmethod
    def _valid_timezone(cls, value: str) -> str:
        from daemon.scheduling.cron import parse_timezone

        parse_timezone(value)
        return value

    @property
    def repo_path(self) -> Path:
        return Path(os.path.expanduser(self.repo)).resolve()


@dataclass
class ConfigError:
    """One problem in one file: where, which key, what to do."""

    file: Path
    key: str
    message: str
    fix: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.key}" if self.key else str(self.file)
        return f"{where}: {self.message}. Fix: {self.fix}"


@dataclass
class Loop:
    """A valid loop file, with its name."""

    name: str
    path: Path
    config: LoopConfig
    notes: list[str] = field(default_factory=list)  # problems that do not disable it


@dataclass
class LoadedConfig:
    """Everything read from a home: the daemon config, the valid loops, and every error."""

    daemon: DaemonConfig
    loops: dict[str, Loop] = field(default_factory=dict)
    errors: list[ConfigError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    daemon_ok: bool = True


_FIXES = {
    "extra_forbidden": "remove it or correct its spelling (see DESIGN.md section 3 for the keys)",
    "missing": "add it",
    "literal_error": "use one of the allowed values",
}


def _key_path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int):
            parts[-1] = f"{parts[-1]}[{part}]" if parts else f"[{part}]"
        else:
            parts.append(str(part))
    return ".".join(parts)


def _errors_from_validation(path: Path, exc: ValidationError) -> list[ConfigError]:
    out = []
    for err in exc.errors():
        msg = err["msg"].removeprefix("Value error, ")
        fix = _FIXES.get(err["type"], "correct the value")
        if err["type"] == "missing":
            msg = "this required key is missing"
        elif err["type"] == "extra_forbidden":
            msg = "unknown key"
        out.append(ConfigError(path, _key_path(err["loc"]), msg, fix))
    return out


def _read_toml(path: Path) -> tuple[dict[str, Any] | None, list[ConfigError]]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh), []
    except tomllib.TOMLDecodeError as exc:
        return None, [ConfigError(path, "", f"TOML syntax error: {exc}", "correct the syntax")]
    except OSError as exc:
        return None, [ConfigError(path, "", f"cannot read: {exc.strerror}", "check the file")]


def load_daemon_config(path: Path) -> tuple[DaemonConfig | None, list[ConfigError]]:
    """Read `loopd.toml`; a missing file means every default."""
    if not path.exists():
        return DaemonConfig(), []
    data, errors = _read_toml(path)
    if data is None:
        return None, errors
    try:
        return DaemonConfig.model_validate(data), []
    except ValidationError as exc:
        return None, _errors_from_validation(path, exc)


def _git_dir_exists(repo: Path) -> bool:
    return (repo / ".git").exists() or (repo / "HEAD").is_file() and (repo / "objects").is_dir()


def check_loop(
    name: str, path: Path, config: LoopConfig, daemon: DaemonConfig
) -> list[ConfigError]:
    """Checks that need more than one file or the disk: repository, agent profile."""
    errors = []
    if not LOOP_NAME.match(name):
        errors.append(
            ConfigError(
                path,
                "",
                f"loop name {name!r} has characters git branches and run ids cannot hold",
                "rename the file using letters, digits, '-', '_' and '.'",
            )
        )
    repo = config.repo_path
    if not repo.exists():
        errors.append(
            ConfigError(path, "repo", f"{repo} does not exist", "point repo at a git repository")
        )
    elif not repo.is_dir() or not _git_dir_exists(repo):
        errors.append(
            ConfigError(
                path,
                "repo",
                f"{repo} is not a git repository",
                f"run `git init {repo}` or point repo at a git repository",
            )
        )
    profile = daemon.profile(config.agent)
    if profile is None:
        errors.append(
            ConfigError(
                path,
                "agent",
                f"no agent profile {config.agent!r}",
                f"add [agents.{config.agent}] to loopd.toml or use one of: "
                + ", ".join(sorted(set(daemon.agents) | set(ADAPTERS) - {"command"})),
            )
        )
    elif profile.adapter == "command" and not profile.command:
        errors.append(
            ConfigError(
                path,
                "agent",
                f"profile {config.agent!r} uses adapter 'command' without a command",
                f'set command = ["my-agent", "{{prompt}}"] under [agents.{config.agent}]',
            )
        )
    return errors


def load_loop(path: Path, daemon: DaemonConfig) -> tuple[Loop | None, list[ConfigError]]:
    """Read one loop file; a broken file yields errors and no loop."""
    data, errors = _read_toml(path)
    if data is None:
        return None, errors
    try:
        config = LoopConfig.model_validate(data)
    except ValidationError as exc:
        return None, _errors_from_validation(path, exc)
    repo = Path(os.path.expanduser(config.repo))
    if not repo.is_absolute():
        # A relative repo is relative to the home, not to wherever loopd was started.
        repo = path.parent.parent / repo
    config = config.model_copy(update={"repo": str(repo.resolve())})
    errors = check_loop(path.stem, path, config, daemon)
    if not config.enabled:
        # A disabled loop may point at a repository that is not there yet (the example does);
        # `loopd once` on it fails with the same message when it matters.
        problems = [e for e in errors if e.key != "repo"]
        if not problems:
            loop = Loop(name=path.stem, path=path, config=config)
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


def _agent_program(profile: AgentProfile | None) -> str:
    """The program a profile starts: the command's first word, else the adapter's CLI."""
    if profile is None:
        return ""
    if profile.adapter == "command":
        return profile.command[0] if profile.command else ""
    return profile.adapter


def _findable(program: str) -> bool:
    if "/" in program:
        return os.access(os.path.expanduser(program), os.X_OK)
    return shutil.which(program) is not None


def load_home(home: Path) -> LoadedConfig:
    """Read `loopd.toml` and every `loops/*.toml`; broken loops are left out and reported."""
    daemon, errors = load_daemon_config(home / "loopd.toml")
    loaded = LoadedConfig(daemon=daemon or DaemonConfig(), errors=list(errors))
    loaded.daemon_ok = daemon is not None
    loops_dir = home / "loops"
    for path in sorted(loops_dir.glob("*.toml")) if loops_dir.is_dir() else []:
        loop, loop_errors = load_loop(path, loaded.daemon)
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
    if loaded.daemon.verifier.configured:
        for loop in loaded.loops.values():
            profile = loaded.daemon.profile(loop.config.agent)
            if profile and profile.model and profile.model == loaded.daemon.verifier.model:
                loaded.warnings.append(
                    f"loop {loop.name!r}: the critic's model {profile.model!r} is the agent's "
                    "model; a separate model judges more independently"
                )
    return loaded
