"""`loopd.toml`: the verifier, agent profiles, notify, limits, rules; its sections in one model."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from daemon.config.base import StrictModel, _argv, _http_url
from daemon.config.engine import EngineConfig
from daemon.config.listen import ListenConfig, RemoteConfig
from daemon.config.sandbox import SandboxConfig
from daemon.scheduling.cron import parse_timezone
from daemon.units import duration, size

# The agent adapters, in one place: the profile's Literal below is built from this tuple and
# daemon/agents/registry.py must register exactly these (tests/test_adapters.py checks).
ADAPTERS = ("qwen", "claude", "codex", "aider", "opencode", "gemini", "command")
Adapter = Literal[ADAPTERS]  # type: ignore[valid-type]

# Agent profiles every home has without writing them, by name. A layer above registers them
# (daemon/example registers `example`), so the configuration knows none of their code.
BUILTIN_PROFILES: dict[str, Callable[[], AgentProfile]] = {}


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
    urls: list[str] = Field([], examples=[["ntfy://ntfy.sh/my-loopd-topic"]])

    @field_validator("urls")
    @classmethod
    def _apprise_urls(cls, value: list[str]) -> list[str]:
        for url in value:
            if "://" not in url or any(c.isspace() or ord(c) < 32 for c in url):
                raise ValueError(f"{url!r} is not an apprise URL such as ntfy://ntfy.sh/TOPIC")
        return value

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
    # Each run's processes (the agent's, setup's, the checks'): see daemon/sandbox/limits.py.
    max_processes: int = Field(1024, ge=16, le=1_000_000)
    max_memory: size("64MB", "64TB") = "8GB"  # type: ignore[valid-type]
    max_tmp: size("1MB", "1TB") = "1GB"  # type: ignore[valid-type]
    max_file_size: size("1MB", "1TB") = "100MB"  # type: ignore[valid-type]
    max_tree: size("1MB", "100TB") = "10GB"  # type: ignore[valid-type]

    @field_validator("timezone")
    @classmethod
    def _valid_timezone(cls, value: str) -> str:
        if value:
            parse_timezone(value)
        return value

    @property
    def worktrees_path(self) -> Path:
        return Path(os.path.expanduser(self.worktrees))

    @property
    def memory_limit(self) -> int:
        """`max_memory` as written, else the smaller of 8 GB and half this machine's memory."""
        if "max_memory" in self.model_fields_set:
            return self.max_memory
        try:
            half = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
        except (ValueError, OSError):
            half = self.max_memory
        return min(self.max_memory, half)


class RulesConfig(StrictModel):
    max_breadth: float = Field(0.3, ge=0.0, le=1.0)


class DaemonConfig(StrictModel):
    """`loopd.toml`."""

    verifier: VerifierConfig = VerifierConfig()
    agents: dict[str, AgentProfile] = {}
    notify: NotifyConfig = NotifyConfig()
    limits: LimitsConfig = LimitsConfig()
    rules: RulesConfig = RulesConfig()
    engine: EngineConfig = EngineConfig()
    sandbox: SandboxConfig = SandboxConfig()
    listen: ListenConfig | None = None  # off unless loopd.toml has a [listen] table
    remotes: dict[str, RemoteConfig] = {}

    def profile(self, name: str) -> AgentProfile | None:
        """The named profile; an adapter's own name works without a profile, and so does a
        registered built-in one (`example`)."""
        if name in self.agents:
            return self.agents[name]
        if name in ADAPTERS and name != "command":
            return AgentProfile(adapter=name)
        if name in BUILTIN_PROFILES:
            return BUILTIN_PROFILES[name]()
        return None


def register_profile(name: str, make: Callable[[], AgentProfile]) -> None:
    """Make `name` a built-in agent profile of every home; `make` builds it when asked."""
    BUILTIN_PROFILES[name] = make
