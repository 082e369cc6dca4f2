"""`loopd.toml`: the verifier, agent profiles, notify, limits, rules; its sections in one model."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from daemon.config.base import StrictModel, _argv, _http_url
from daemon.config.engine import EngineConfig
from daemon.config.listen import ListenConfig, RemoteConfig
from daemon.config.notify import NotifyConfig
from daemon.config.sandbox import SandboxConfig
from daemon.config.telemetry import TelemetryConfig
from daemon.plugins import AGENTS, SHIPPED, is_installed
from daemon.scheduling.cron import parse_timezone
from daemon.units import duration, size

# Every `# type: ignore[valid-type]` below: `size(...)` and `duration(...)` build their types
# when the module loads, which a type checker cannot read as types.

# loopd's own agent adapters, registered in the `loopd.agents` entry-point group like any
# plugin's (daemon/plugins.py); a profile's `adapter` may name any installed one, and a loop
# using a name no package registers is refused by `check` (config/loading.py).
ADAPTERS = tuple(SHIPPED[AGENTS])
Adapter = str
_OWN = ", ".join(f'`"{name}"`' for name in ADAPTERS)

# Agent profiles every home has without writing them, by name. A layer above registers them
# (daemon/example registers `example`), so the configuration knows none of their code.
BUILTIN_PROFILES: dict[str, Callable[[], AgentProfile]] = {}


class VerifierConfig(StrictModel):
    base_url: str = Field(
        "",
        examples=["http://127.0.0.1:8000/v1"],
        description="the endpoint; empty: no verifier",
        json_schema_extra={
            "allowed": "an `http://` or `https://` URL with a host, usually ending in `/v1`"
        },
    )
    model: str = Field(
        "",
        examples=["qwen3-30b-a3b-instruct"],
        description=(
            "the model to ask; should differ from the agents' model (`check` warns "
            "when it is the same)"
        ),
    )
    api_key_env: str = Field(
        "",
        examples=["LOCAL_LLM_KEY"],
        description=(
            "the variable holding the endpoint's key; empty: a placeholder key "
            "(keyless local servers accept any)"
        ),
        json_schema_extra={"allowed": "an environment variable's name"},
    )
    timeout: duration("100ms", "1h") = Field(  # type: ignore[valid-type]
        "60s", description="how long one model call may take"
    )
    pending_limit: duration("0s", "365d") = Field(  # type: ignore[valid-type]
        "6h",
        description=(
            "a run whose judging cannot reach the endpoint waits in `judging`; past "
            "this it is escalated, never passed unjudged"
        ),
    )
    evidence_tokens: int = Field(
        12000,
        ge=1000,
        le=1_000_000,
        description="the critic's evidence budget; 4 characters count as a token",
    )
    judge_timeout: duration("0s", "10m") = Field(  # type: ignore[valid-type]
        "800ms",
        description=(
            "the one semantic call that picks rules for a new task; on timeout the "
            "lexical matches alone are used"
        ),
    )
    judge_candidates: int = Field(
        40,
        ge=0,
        le=1000,
        description=("at most this many rule intents go into that call; 0: lexical matches only"),
    )
    embeddings_model: str = Field(
        "",
        examples=["nomic-embed-text"],
        description=(
            "optional: a model behind `/v1/embeddings` that pre-filters the "
            "candidates (without it: word overlap)"
        ),
    )
    second: str = Field(
        "",
        examples=["second-judge"],
        description=(
            "an `[agents.NAME]` profile with a `base_url`: its endpoint and model judge every "
            "attempt too, and an attempt passes only when both judges pass it; `loopd "
            "calibrate` then reports the pair; empty: one judge"
        ),
    )
    max_false_pass: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        description=(
            "`loopd status` and `loopd check` warn when the last `loopd calibrate` of "
            "`model` found it passing more than this share of bad attempts, or when "
            "`model` was never calibrated ([calibration.md](calibration.md))"
        ),
    )

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
    adapter: Adapter = Field(
        "qwen",
        description="which agent CLI to drive",
        json_schema_extra={"allowed": f"{_OWN}, or a plugin's name ([adapters](adapters.md))"},
    )
    model: str = Field(
        "",
        examples=["qwen3-coder-30b-a3b-instruct"],
        description="the model the agent uses; empty: the agent's own default",
    )
    base_url: str = Field(
        "",
        examples=["http://127.0.0.1:8000/v1"],
        description="the agent's own endpoint, for adapters that take one",
        json_schema_extra={"allowed": "an `http://` or `https://` URL with a host"},
    )
    api_key_env: str = Field(
        "",
        examples=["LOCAL_LLM_KEY"],
        description="the key is passed to the agent the way it expects",
        json_schema_extra={"allowed": "an environment variable's name"},
    )
    args: list[str] = Field(
        [], examples=[["--verbose"]], description="extra arguments for the agent's command line"
    )
    env: dict[str, str] = Field(
        {},
        examples=[{"HTTPS_PROXY": "http://127.0.0.1:3128"}],
        description=(
            "extra environment for the agent (not for the checks), e.g. `env = { "
            'HTTPS_PROXY = "http://127.0.0.1:3128" }`. For a `command` agent, a value'
            " that is an existing absolute path is visible read-only in the sandbox"
        ),
    )
    command: list[str] = Field(
        [],
        examples=[["my-agent", "--task", "{prompt}"]],
        description=(
            "the program and its arguments (argv, never a shell). `{prompt}` in an "
            "argument is replaced by the prompt; without `{prompt}` the prompt "
            "arrives on stdin"
        ),
        json_schema_extra={"allowed": 'non-empty strings; required with `adapter = "command"`'},
    )
    price: Price = Field(
        Price(),
        description=(
            "USD per million input and output tokens: each attempt's and run's "
            "`cost_usd` in run.toml, `loopd show` and the report. Unset (both 0): the"
            " cost the agent reports itself (Claude Code, opencode, aider), else 0"
        ),
        json_schema_extra={"allowed": "`input` and `output` each 0 to 10000"},
    )

    _command_argv = field_validator("command")(_argv)
    _base_url = field_validator("base_url")(_http_url)


class LimitsConfig(StrictModel):
    max_concurrent_runs: int = Field(
        1, ge=1, le=64, description="runs at the same time, over all loops"
    )
    retain_days: int = Field(
        30,
        ge=0,
        le=3650,
        description=(
            "runs finished longer ago are pruned: their folders (transcripts, attempt "
            "folders) and `loopd/*` branches go, each kept as a line of "
            "`state/pruned-runs.jsonl`, except what an open escalation or a live rule's "
            "evidence cites; 0 keeps everything"
        ),
    )
    transcript_cap: size("64KB", "10GB") = Field(  # type: ignore[valid-type]
        "50MB", description="one attempt's transcript stops growing here (with a marker)"
    )
    prompt_cap: size("4KB", "10MB") = Field(  # type: ignore[valid-type]
        "100KB",
        description=(
            "one prompt's size; the checks' output is cut first. Agents that take the"
            " prompt as one argument are bound by Linux's 128 KiB limit on a single "
            "argument"
        ),
    )
    shutdown_grace: duration("0s", "1d") = Field(  # type: ignore[valid-type]
        "30s",
        description=(
            "on SIGTERM, how long `loopd once` and `loopd run` take at most to stop "
            "(at least 5 s; the unit `loopd systemd install` writes allows 90 s for "
            "the whole stop). A running attempt's agent gets the grace less what "
            "loopd keeps to take its work and write the run's record (a third of the "
            "grace, at most 10 s: 20 s of the default 30 s), then it is stopped as "
            "`interrupted`. Whatever the run is doing (preparing, a model call, git, "
            "landing), past the grace what they started is killed and they exit 1, "
            "and the run they leave is ended as `interrupted` by the next `loopd once`"
            " of its loop or `loopd run`; a second SIGTERM or Ctrl-C shortens the wait"
            " to 5 s"
        ),
    )
    worktrees: str = Field(
        "~/.cache/loopd/worktrees",
        description=(
            "where run trees are made (a clone or worktree per run, and loopd's own "
            "git directory for it, `RUN_ID.git`): outside the home and outside your "
            "repositories"
        ),
        json_schema_extra={"allowed": "a folder; `~` is expanded"},
    )
    events_rotate: size("64KB", "10GB") = Field(  # type: ignore[valid-type]
        "64MB",
        description=(
            "`state/events.jsonl` rotates to `events-N.jsonl` past this size; a rotated "
            "file whose last event is older than `retain_days` is deleted"
        ),
    )
    state_max: size("100MB", "100TB") = Field(  # type: ignore[valid-type]
        "20GB",
        description=(
            "how large `state/` may grow as a whole, event files included; unset, the "
            "smaller of 20GB and a quarter of the disk it is on. Measured hourly, and at "
            "once when the growth estimated every 10 s passes it: over it, the transcripts "
            "of the oldest finished runs are deleted first (each run's `evicted.toml` says "
            "so, and the event `state_evicted`), then the rest of their attempt folders, "
            "then the oldest rotated event files; never a live run's, nor the evidence an "
            "open escalation, a live rule or a deferred lesson cites. `loopd status` shows "
            "the home's size, the measure's age and its largest loops"
        ),
    )
    max_wait: duration("0s", "30d") = Field(  # type: ignore[valid-type]
        "12h",
        description=(
            "a run parked on its agent's usage limit is escalated (cause "
            "`quota-wait-exceeded`) when the limit lifts later than this after the "
            "wait began"
        ),
    )
    daily_tokens: int = Field(
        0,
        ge=0,
        le=10**15,
        description=(
            "tokens all loops together may spend a day; once spent, new runs wait "
            "until the next day (event `budget_exhausted` once a day; `status` and "
            "the report show it); a run in progress finishes. 0: no budget"
        ),
    )
    timezone: str = Field(
        "",
        examples=["Europe/Berlin"],
        description="the zone whose midnight starts the day of `daily_tokens`",
        json_schema_extra={
            "allowed": (
                'an IANA time zone name, e.g. `"Europe/Berlin"`; empty: this machine\'s zone'
            )
        },
    )
    # Each run's processes (the agent's, setup's, the checks'): see daemon/sandbox/limits.py.
    max_processes: int = Field(
        1024,
        ge=16,
        le=1_000_000,
        description=(
            "processes one run's sandboxed tree may have at once (the agent's, "
            "setup's or a check's). A fork that would pass it fails in the agent; a "
            "run whose agent ran into it and whose checks still fail ends with cause "
            "`resource-limit`. Enforced by a control group of the launch's own "
            "(cgroup v2 with a delegated `pids` controller: the unit `loopd systemd "
            "install` writes has `Delegate=pids memory`, and loopd then moves itself "
            "into a leaf group `loopd`; else cgroup v1 `pids`; else, under systemd, a"
            " transient scope per launch, `systemd-run --scope -p TasksMax=`, where an"
            " out-of-memory kill is seen but a fork refused is not); where none can be"
            " used, by RLIMIT_NPROC, which the kernel does not apply to root: `loopd "
            "check` and `loopd status` print the `limits:` line that says which"
        ),
    )
    max_memory: size("64MB", "64TB") = Field(  # type: ignore[valid-type]
        "8GB",
        description=(
            "memory of one run's sandboxed tree together (the control group's memory "
            "limit); unset, the smaller of 8GB and half this machine's memory; "
            "without a control group, each process's data (RLIMIT_DATA)"
        ),
    )
    max_tmp: size("1MB", "1TB") = Field(  # type: ignore[valid-type]
        "1GB",
        description=(
            "size of each tmpfs the sandbox mounts (its `/tmp`, the empty folders "
            "over homes and `/run`): they live in memory; and of the agent's scratch "
            "folder on disk (its HOME and TMPDIR), measured every 5 seconds while the "
            "agent runs (each file, folder and link at least 4KiB): over it, a "
            "`resource_limit` event and the attempt ends at once (no nudge)"
        ),
    )
    max_file_size: size("1MB", "1TB") = Field(  # type: ignore[valid-type]
        "100MB",
        description=(
            "the largest file the agent's processes may write (RLIMIT_FSIZE; setup "
            "and checks are not bound by it)"
        ),
    )
    max_tree: size("1MB", "100TB") = Field(  # type: ignore[valid-type]
        "10GB",
        description=(
            "the size of a run's tree (the agent's files, its `.git` included; each "
            "file, folder and link at least 4KiB, so entries count as well as bytes), "
            "measured as each agent session ends: over it, the attempt ends at once "
            "(no nudge) and a run whose checks still fail ends with cause "
            "`resource-limit`; a commit whose tree is over it (and larger than the "
            "base's) is kept out of your repository (a `too_large` violation)"
        ),
    )

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

    def state_limit(self, state_dir: Path) -> int:
        """`state_max` as written, else the smaller of 20 GB and a quarter of the disk that
        holds `state_dir`."""
        if "state_max" in self.model_fields_set:
            return self.state_max
        try:
            disk = os.statvfs(state_dir)
        except OSError:
            return self.state_max
        return min(self.state_max, disk.f_frsize * disk.f_blocks // 4)


class RulesConfig(StrictModel):
    max_breadth: float = Field(
        0.3,
        ge=0.0,
        le=1.0,
        description=(
            "a trial rule due for promotion is replayed over the last 30 days of "
            "recorded runs (`loopd replay`); when it fires on more than this share of"
            " the runs of loops other than the one it was learned in, it stays in "
            "trial with that reason. Judged once at least 10 such runs are on record"
        ),
    )


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
    telemetry: TelemetryConfig = TelemetryConfig()

    @model_validator(mode="after")
    def _second_judge(self) -> DaemonConfig:
        name = self.verifier.second
        if name and not (name in self.agents and self.agents[name].base_url):
            raise ValueError(
                f"[verifier] second = {name!r} names no [agents.{name}] with a base_url; "
                f"add [agents.{name}] with base_url and model, or remove second"
            )
        return self

    def second_judge(self) -> VerifierConfig | None:
        """`[verifier] second` as endpoint settings: the profile's endpoint, model and key
        with `[verifier]`'s timeouts and evidence budget; None without a second judge."""
        name = self.verifier.second
        if not name or not self.verifier.configured or name not in self.agents:
            return None
        profile = self.agents[name]
        return self.verifier.model_copy(
            update={
                "base_url": profile.base_url,
                "model": profile.model,
                "api_key_env": profile.api_key_env,
                "second": "",
            }
        )

    def profile(self, name: str) -> AgentProfile | None:
        """The named profile; an adapter's own name works without a profile, and so does a
        registered built-in one (`example`)."""
        if name in self.agents:
            return self.agents[name]
        if name != "command" and is_installed(AGENTS, name):
            return AgentProfile(adapter=name)
        if name in BUILTIN_PROFILES:
            return BUILTIN_PROFILES[name]()
        return None


def register_profile(name: str, make: Callable[[], AgentProfile]) -> None:
    """Make `name` a built-in agent profile of every home; `make` builds it when asked."""
    BUILTIN_PROFILES[name] = make
