"""Pydantic models of `loopd.toml` and `loops/*.toml`: load, validate, explain.

The user's reference for every key here is `docs/configuration.md`; change both together
(tests/test_config_docs.py checks that every key is documented with its range).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from daemon import example
from daemon.config_errors import ConfigError, did_you_mean, explain
from daemon.config_land import RunEnds, check_run_ends
from daemon.units import duration, size

# The agent adapters, in one place: the profile's Literal below is built from this tuple and
# daemon/agents/registry.py must register exactly these (tests/test_adapters.py checks).
ADAPTERS = ("qwen", "claude", "codex", "aider", "opencode", "gemini", "command")
Adapter = Literal[ADAPTERS]  # type: ignore[valid-type]
LOOP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# A loop's name is in every RUN_ID and branch name a person reads and copies.
LOOP_NAME_MAX = 32


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


class Price(StrictModel):
    """USD per million tokens, as the provider bills them."""

    input: float = Field(0.0, ge=0, le=10_000)
    output: float = Field(0.0, ge=0, le=10_000)

    @property
    def set(self) -> bool:
        return bool(self.input or self.output)

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """The cost in USD of these tokens."""
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


class AgentProfile(StrictModel):
    adapter: Adapter = "qwen"  # type: ignore[valid-type]
    model: str = Field("", examples=["qwen3-coder-30b-a3b-instruct"])
    base_url: str = Field("", examples=["http://127.0.0.1:8000/v1"])
    api_key_env: str = Field("", examples=["LOCAL_LLM_KEY"])
    args: list[str] = Field([], examples=[["--verbose"]])
    env: dict[str, str] = Field({}, examples=[{"HTTPS_PROXY": "http://127.0.0.1:3128"}])
    command: list[str] = Field([], examples=[["my-agent", "--task", "{prompt}"]])
    price: Price = Price()

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
    max_wait: duration("0s", "30d") = "12h"  # type: ignore[valid-type]
    daily_tokens: int = Field(0, ge=0, le=10**15)
    timezone: str = Field("", examples=["Europe/Berlin"])

    @field_validator("timezone")
    @classmethod
    def _valid_timezone(cls, value: str) -> str:
        if value:
            from daemon.scheduling.cron import parse_timezone

            parse_timezone(value)
        return value

    @property
    def worktrees_path(self) -> Path:
        return Path(os.path.expanduser(self.worktrees))


class RulesConfig(StrictModel):
    max_breadth: float = Field(0.3, ge=0.0, le=1.0)


ENGINES = ("local", "temporal")
QUEUE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _queue_name(value: str) -> str:
    if value and not QUEUE_NAME.match(value):
        raise ValueError(f"{value!r} is not a plain name: use letters, digits, '-', '_' and '.'")
    return value


class EngineConfig(StrictModel):
    """`[engine]`: where scheduling and runs happen; `local` is everything in this process."""

    kind: Literal[ENGINES] = "local"  # type: ignore[valid-type]
    address: str = "127.0.0.1:7233"
    namespace: str = "default"
    task_queue: str = "loopd"
    remote: str = Field("", examples=["ssh://git.example.com/srv/loopd/{loop}.git"])
    heartbeat_timeout: duration("1s", "1h") = "60s"  # type: ignore[valid-type]
    tls_cert: str = Field("", examples=["engine/client.pem"])
    tls_key: str = Field("", examples=["engine/client.key"])
    tls_ca: str = Field("", examples=["engine/ca.pem"])
    api_key_file: str = Field("", examples=["engine/api-key"])

    _task_queue = field_validator("task_queue")(_queue_name)

    @field_validator("address")
    @classmethod
    def _host_port(cls, value: str) -> str:
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f'{value!r} is not HOST:PORT, e.g. "127.0.0.1:7233"')
        return value

    @property
    def temporal(self) -> bool:
        return self.kind == "temporal"

    @property
    def secured(self) -> bool:
        """A client certificate or an API key authenticates loopd to the engine."""
        return bool(self.tls_cert or self.api_key_file)


def _host_paths(value: list[str]) -> list[str]:
    for path in value:
        if not os.path.isabs(os.path.expanduser(path)):
            raise ValueError(f"{path!r} is not a path from / or ~")
    return value


class SandboxConfig(StrictModel):
    mode: Literal["auto", "bwrap", "off"] = "auto"
    writable: list[str] = Field([], examples=[["~/.cache/pip"]])
    readable: list[str] = Field([], examples=[["~/.pyenv"]])
    network: bool = True

    _writable = field_validator("writable")(_host_paths)
    _readable = field_validator("readable")(_host_paths)


class DaemonConfig(StrictModel):
    """`loopd.toml`."""

    verifier: VerifierConfig = VerifierConfig()
    agents: dict[str, AgentProfile] = {}
    notify: NotifyConfig = NotifyConfig()
    limits: LimitsConfig = LimitsConfig()
    rules: RulesConfig = RulesConfig()
    engine: EngineConfig = EngineConfig()
    sandbox: SandboxConfig = SandboxConfig()

    def profile(self, name: str) -> AgentProfile | None:
        """The named profile; an adapter's own name works without a profile, and `example`
        is the embedded example's agent."""
        if name in self.agents:
            return self.agents[name]
        if name in ADAPTERS and name != "command":
            return AgentProfile(adapter=name)
        if name == example.PROFILE:
            # This Python runs a copy of the script outside any home (a sandbox hides the
            # home, and a checkout is one), named by its full path: shown read-only.
            return AgentProfile(
                adapter="command", command=[sys.executable, str(example.agent_path())]
            )
        return None


class LoopConfig(StrictModel, RunEnds):
    """`loops/NAME.toml` (its setup and landing keys: daemon/config_land.py)."""

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
    daily_tokens: int = Field(0, ge=0, le=10**15)
    critic: Literal["on", "off"] = "on"
    critic_threshold: int = Field(7, ge=0, le=10)
    notify_on: list[Literal["escalated", "succeeded", "failed-attempt", "waiting"]] = ["escalated"]
    runs_on: str = Field("", examples=["gpu"])

    _runs_on = field_validator("runs_on")(_queue_name)
    env: dict[str, str] = Field({}, examples=[{"PYTHONPATH": "{tree}/src"}])
    checks_env: list[str] = Field([], examples=[["DATABASE_URL"]])

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            _variable_name(name)
        return value

    @field_validator("checks_env")
    @classmethod
    def _checks_env_names(cls, value: list[str]) -> list[str]:
        for name in value:
            _variable_name(name)
        return value

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


ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _variable_name(name: str) -> str:
    """An environment variable loopd may set for a run's processes."""
    if not ENV_NAME.match(name):
        raise ValueError(f"{name!r} is not an environment variable name (letters, digits, _)")
    if name == "HOME":
        raise ValueError("HOME is set by loopd: a fresh one for each run")
    if name == "NOTIFY_SOCKET" or name.startswith("LOOPD_"):
        raise ValueError(f"{name} is loopd's own and never reaches an agent or a check")
    return name


@dataclass
class Loop:
    """A valid loop file, with its name."""

    name: str
    path: Path
    config: LoopConfig
    notes: list[str] = field(default_factory=list)  # problems that do not disable it
    # A disabled loop's problems (errors were it enabled): `loopd once --force` refuses on them.
    problems: list[ConfigError] = field(default_factory=list)


@dataclass
class LoadedConfig:
    """Everything read from a home: the daemon config, the valid loops, and every error."""

    daemon: DaemonConfig
    loops: dict[str, Loop] = field(default_factory=dict)
    errors: list[ConfigError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    daemon_ok: bool = True
    # Problems of loop files that say `enabled = false` but do not load: warnings, not errors.
    disabled_errors: list[ConfigError] = field(default_factory=list)


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
    elif len(name) > LOOP_NAME_MAX:
        errors.append(
            ConfigError(
                path,
                "",
                f"loop name {name!r} is {len(name)} characters long; at most {LOOP_NAME_MAX} "
                "(it is part of every RUN_ID and branch name)",
                f"rename the file to a name of at most {LOOP_NAME_MAX} characters, "
                f"e.g. {name[:LOOP_NAME_MAX].rstrip('-_.')}.toml",
            )
        )
    repo = config.repo_path
    if example.is_example_repo(repo) and not (repo / ".git").exists():
        pass  # the example's repository: loopd makes it before the first run that needs it
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
                'use isolation = "worktree" (each attempt\'s commit goes to [engine] remote)',
            )
        )
    profile = daemon.profile(config.agent)
    if profile is None:
        known = sorted(set(daemon.agents) | set(ADAPTERS) - {"command"} | {example.PROFILE})
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
    return errors + check_run_ends(path, config, daemon)


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
        with path.open("rb") as fh:
            return tomllib.load(fh).get("enabled") is False
    except (OSError, ValueError):
        return False


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
    loaded.warnings.extend(engine_warnings(home, loaded))
    if loaded.daemon.verifier.configured:
        for loop in loaded.loops.values():
            profile = loaded.daemon.profile(loop.config.agent)
            if profile and profile.model and profile.model == loaded.daemon.verifier.model:
                loaded.warnings.append(
                    f"loop {loop.name!r}: the critic's model {profile.model!r} is the agent's "
                    "model; a separate model judges more independently"
                )
    return loaded


def engine_warnings(home: Path, loaded: LoadedConfig) -> list[str]:
    """What a person should know about `[engine]`: an engine any agent could reach."""
    engine = loaded.daemon.engine
    if not engine.temporal or engine.secured:
        return []
    return [
        f"loopd.toml: [engine]: no tls_cert and no api_key_file, so the engine at "
        f"{engine.address} accepts anyone who can reach it, agents with network access "
        "included; loopd's own activities act only for runs this home started. Give the "
        "engine a client certificate or an API key (files in the home, hidden from agents)"
    ]
