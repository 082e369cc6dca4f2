"""Engines by name: `[engine] kind` in loopd.toml picks one (daemon/engine/base.py)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from daemon.engine.base import Engine, EngineError
from daemon.extras import install_command

if TYPE_CHECKING:
    from daemon.config import LoadedConfig
    from daemon.home import Home

__all__ = [
    "ENGINES",
    "EXTRAS",
    "Engine",
    "EngineError",
    "MissingExtra",
    "engine_for",
    "missing_extra",
]

# kind -> (module, class); a kind's module is imported only when a home uses it.
ENGINES: dict[str, tuple[str, str]] = {
    "local": ("daemon.engine.local", "LocalEngine"),
    "temporal": ("daemon.engine.temporal.engine", "TemporalEngine"),
}

# kind -> (the module it needs, the extra of loopd that installs it): not every install has it.
EXTRAS: dict[str, tuple[str, str]] = {
    "temporal": ("temporalio", "temporal"),
}


class MissingExtra(EngineError):
    """The engine a home names needs an optional dependency this install does not have."""


def missing_extra(kind: str) -> tuple[str, str] | None:
    """(what is missing, the command that installs it) when engine `kind` cannot load, else None."""
    if kind not in EXTRAS:
        return None
    module, extra = EXTRAS[kind]
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        # `exc.name` is what is missing: the SDK itself, or a module the SDK needs.
        missing = exc.name or module
        what = f"the Python package {module}" + ("" if missing == module else f" ({missing})")
        return f"{what}, which is not installed", install_command(extra)
    return None


def engine_for(home: Home, loaded: LoadedConfig | None = None) -> Engine:
    """The engine `[engine] kind` of the home's loopd.toml names (local when unreadable)."""
    loaded = loaded or home.load()
    kind = loaded.daemon.engine.kind if loaded.daemon_ok else "local"
    needs = missing_extra(kind)
    if needs:
        raise MissingExtra(
            f'{home.config_path}: [engine] kind = "{kind}" needs {needs[0]}: {needs[1]} '
            '(or use kind = "local")'
        )
    module, name = ENGINES[kind]
    cls: type[Engine] = getattr(importlib.import_module(module), name)
    return cls(home)
