"""Adapters by name: one class for each name of `daemon.config.ADAPTERS`."""

from __future__ import annotations

import importlib

from daemon.agents.base import AgentAdapter
from daemon.config import ADAPTERS

# Imported on first use, so `loopd check` and `status` load no adapter code.
_MODULES = {name: (f"daemon.agents.{name}", f"{name.capitalize()}Adapter") for name in ADAPTERS}


def adapter_class(name: str) -> type[AgentAdapter]:
    """The adapter class registered under `name`."""
    try:
        module_name, class_name = _MODULES[name]
    except KeyError:
        raise KeyError(f"no agent adapter {name!r}; known: {', '.join(ADAPTERS)}") from None
    return getattr(importlib.import_module(module_name), class_name)
