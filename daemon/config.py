"""Pydantic models of `loopd.toml` and `loops/*.toml`: load, validate, explain.

The user's reference for every key here is `docs/configuration.md`; change both together
(tests/test_config_docs.py checks that every key is documented with its range).
"""

from __future__ import annotations

import os
import re
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from daemon.config_errors import ConfigError, did_you_mean, explain
from daemon.units import duration, size

# The agent adapters, in one place: the profile's Literal below is built from this tuple and
# daemon/agents/registry.py must register exactly these (tests/test_adapters.py checks).
ADAPTERS = ("qwen", "claude", "codex", "aider", "opencode", "gemini", "command")
Adapter = Literal[ADAPTERS]  # type: ignore[valid-type]
LOOP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


def _argv(value: list[str]) -> list[str]:
    if any(not part.strip() for part in value):
        raise ValueError("holds an empty argument")
    return value


def _http_url(value: str) -> str:
    """An http(s) URL with a host, or empty: anything else fails only at its first use."""
    if not value:
        return value
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError:
        raise ValueError(f"{value!r} has a port that is not a number") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http:// or https:// URL with a host")
    if any(c.isspace() or ord(c) < 32 for c in value):
        raise ValueError(f"{value!r} holds a space or a control character")
    return value


class VerifierConfig(StrictModel):
    base_url: str = Field("", examples=["http://127.0.0.1:8000/v1"])
    model: str = Field("", examples=["qwen3-30b-a3b-instruct"])
    api_key_env: str = Field("", examples=["LOCAL_LLM_KEY"])
    timeout: duration("100ms", "1h") = "60s"  # type: ignore[valid-type]
    pending_limit: duration("0s", "365d") = "6h"  # type: ignore[valid-type]
    evidence_tokens: int = Field(12000, ge=1000, le=1_000_000)
    judge_timeout: duration("0s", "10m") = "800ms"  # type: ignore[valid-type]
    judge_candidates: int = Field(40, ge=0, le=1000)
    embeddings_model: str = Field("", examples=["nomic-embed-text"])

    _base_url = field_validator("base_url")(_http_url)

    @property
    def configured(self) -> bool:
        return bool(self.base_url)


class AgentProfile(StrictModel):
    adapter: Adapter = "qwen"  # type: ignore[valid-type]
    model: str = Field("", examples=["qwen3-coder-30b-a3b-instruct"])
    base_url: str = Field("", examples=["http://127.0.0.1:8000/v1"])
    api_key_env: str = Field("", examples=["LOCAL_LLM_KEY"])
    args: list[str] = Field([], examples=[["--verbose"]])
    env: dict[str, str] = Field({}, examples=[{"HTTPS_PROXY": "http://127.0.0.1:3128"}])
    command: list[str] = Field([], examples=[["my-agent", "--task", "{prompt}"]])

    _command_argv = field_validator("command")(_argv)
    _base_url = field_validator("base_url")(_http_url)


class NotifyConfig(StrictModel):
    command: list[str] = Field([], examples=[["notify-send", "loopd"]])
    webhook: str = Field("", examples=["https://hooks.example.com/loopd"])

    _command_argv = field_validator("command")(_argv)
    _webhook_url = field_validator("webhook")(_http_url)


class LimitsConfig(StrictModel):
    max_concurrent_runs: int = Field(1, ge=1, le=64)
    retain_days: int = Field(30, ge=0, le=3650)
    transcript_cap: size("64KB", "10GB") = "50MB"  # type: ignore[valid-type]
    prompt_cap: size("4KB", "10MB") = "100KB"  # type: ignore[valid-type]
    shutdown_grace: duration("0s", "1d") = "30s"  # type: ignore[valid-type]
    worktrees: str = "~/.cache/loopd/worktrees"
    events_rotate: size("64KB", "10GB") = "64MB"  # type: ignore[valid-type]

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
            return AgentProfile(adapter=name)
        return None


class LoopConfig(StrictModel):
    """`loops/NAME.toml`."""

    repo: str = Field(examples=["~/src/app"])
    task: str = Field(examples=["Make the failing tests pass without weakening them."])
    agent: str = "qwen"
    enabled: bool = True
    schedule: list[str] = Field([], examples=[["0 2 * * *"]])
    timezone: str = "UTC"
    catch_up: duration("0s", "365d") = "1h"  # type: ignore[valid-type]
    on_push: list[str] = Field([], examples=[["main"]])
    on_change: list[str] = Field([], examples=[["src/**"]])
    debounce: duration("0s", "1d") = "10s"  # type: ignore[valid-type]
    overlap: Literal["coalesce", "skip", "queue"] = "coalesce"
    max_queued: int = Field(10, ge=1, le=100_000)
    isolation: Literal["clone", "worktree", "in-place"] = "clone"
    base: str = "HEAD"
    done_when: list[str] = Field([], examples=[["python3 -m pytest -q"]])
    check_timeout: duration("1s", "1d") = "10m"  # type: ignore[valid-type]
    protect: list[str] = Field([], examples=[["tests/**"]])
    max_attempts: int = Field(3, ge=1, le=100)
    attempt_timeout: duration("1s", "7d") = "45m"  # type: ignore[valid-type]
    stall_after: duration("0s", "1d") = "5m"  # type: ignore[valid-type]
    max_nudges: int = Field(2, ge=0, le=100)
    nudge: str = "Continue the task. If something blocks you, say exactly what."
    max_tokens: int = Field(0, ge=0, le=10_000_000_000)
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


def _section_keys(model: type[BaseModel], where: str) -> dict[str, str]:
    return {name: where for name in model.model_fields}


def _daemon_keys() -> dict[str, str]:
    """Where each loopd.toml key lives, for a key written into the wrong file or section."""
    out: dict[str, str] = {}
    for section, model in (
        ("verifier", VerifierConfig),
        ("notify", NotifyConfig),
        ("limits", LimitsConfig),
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


def _read_toml(path: Path) -> tuple[dict[str, Any] | None, list[ConfigError]]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh), []
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
    data, errors = _read_toml(path)
    if data is None:
        return None, errors
    try:
        return DaemonConfig.model_validate(data), []
    except ValidationError as exc:
        return None, _errors_from_validation(path, DaemonConfig, exc)


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
    profile = daemon.profile(config.agent)
    if profile is None:
        known = sorted(set(daemon.agents) | set(ADAPTERS) - {"command"})
        guess = did_you_mean(config.agent, known)
        errors.append(
            ConfigError(
                path,
                "agent",
                f"no agent profile {config.agent!r}",
                (f"did you mean {guess!r}? " if guess else "")
                + f"add [agents.{config.agent}] to loopd.toml or use one of: "
                + ", ".join(known),
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
        return None, _errors_from_validation(path, LoopConfig, exc)
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
        if not loaded.daemon_ok:
            # Profiles live in the broken loopd.toml: "no profile" would only mislead.
            loop_errors = [e for e in loop_errors if e.key != "agent"]
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
