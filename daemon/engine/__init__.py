"""Engines by name: `[engine] kind` in loopd.toml picks one (daemon/engine/base.py)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from daemon.engine.base import Engine, EngineError

if TYPE_CHECKING:
    from daemon.config import LoadedConfig
    from daemon.home import Home

__all__ = ["ENGINES", "Engine", "EngineError", "engine_for"]

# kind -> (module, class); a kind's module is imported only when a home uses it.
ENGINES: dict[str, tuple[str, str]] = {
    "local": ("daemon.engine.local", "LocalEngine"),
    "temporal": ("daemon.engine.temporal.engine", "TemporalEngine"),
}


def engine_for(home: Home, loaded: LoadedConfig | None = None) -> Engine:
    """The engine `[engine] kind` of the home's loopd.toml names (local when unreadable)."""
    loaded = loaded or home.load()
    kind = loaded.daemon.engine.kind if loaded.daemon_ok else "local"
    module, name = ENGINES[kind]
    cls: type[Engine] = getattr(importlib.import_module(module), name)
    return cls(home)
