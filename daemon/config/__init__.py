"""Pydantic models of `loopd.toml` and `loops/*.toml`: load, validate, explain.

The user's reference for every key here is `docs/configuration.md`: its key tables are made
from the models' fields and descriptions by `python -m daemon.config.reference` (reference.py;
tests/test_config_docs.py fails when they are stale). By concept:
`base.py` (what every model shares), `home_file.py` (loopd.toml), `engine.py` (`[engine]`),
`sandbox.py` (`[sandbox]`), `notify.py` (`[notify]`), `listen.py` (`[listen]`,
`[remotes.NAME]`), `telemetry.py` (`[telemetry]`), `loop_file.py` (a loop file),
`loading.py` (reading a home).
"""

from daemon.config.base import QUEUE_NAME, StrictModel
from daemon.config.engine import ENGINES, EngineConfig, engine_warnings
from daemon.config.home_file import (
    ADAPTERS,
    Adapter,
    AgentProfile,
    DaemonConfig,
    LimitsConfig,
    Price,
    RulesConfig,
    VerifierConfig,
    register_profile,
)
from daemon.config.listen import ListenConfig, RemoteConfig
from daemon.config.loading import (
    LoadedConfig,
    check_loop,
    load_daemon_config,
    load_home,
    load_loop,
    register_prepared_repo,
)
from daemon.config.loop_file import ENV_NAME, LOOP_NAME, LOOP_NAME_MAX, Loop, LoopConfig
from daemon.config.notify import NotifyConfig
from daemon.config.sandbox import SandboxConfig
from daemon.config.telemetry import TelemetryConfig

__all__ = [
    "ADAPTERS",
    "ENGINES",
    "ENV_NAME",
    "LOOP_NAME",
    "LOOP_NAME_MAX",
    "QUEUE_NAME",
    "Adapter",
    "AgentProfile",
    "DaemonConfig",
    "EngineConfig",
    "LimitsConfig",
    "ListenConfig",
    "LoadedConfig",
    "Loop",
    "LoopConfig",
    "NotifyConfig",
    "Price",
    "RemoteConfig",
    "RulesConfig",
    "SandboxConfig",
    "StrictModel",
    "TelemetryConfig",
    "VerifierConfig",
    "check_loop",
    "engine_warnings",
    "load_daemon_config",
    "load_home",
    "load_loop",
    "register_prepared_repo",
    "register_profile",
]
