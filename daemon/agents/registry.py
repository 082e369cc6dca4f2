"""Adapters by name: the `loopd.agents` entry-point group (daemon/plugins.py), loopd's own
adapters registered there as a third-party package registers its own."""

from __future__ import annotations

from daemon.agents.base import AgentAdapter
from daemon.plugins import AGENTS, PluginError, load, names

__all__ = ["PluginError", "adapter_class", "adapter_names"]


def adapter_class(name: str) -> type[AgentAdapter]:
    """The adapter class registered under `name`, imported on first use (PluginError: why not)."""
    cls = load(AGENTS, name)
    if not issubclass(cls, AgentAdapter):  # load() checked its ancestry by name only
        raise PluginError(f"{AGENTS} plugin {name!r}: {cls!r} is not an AgentAdapter subclass")
    return cls


def adapter_names() -> tuple[str, ...]:
    """Every installed adapter's name: loopd's own first, then the plugins'."""
    return names(AGENTS)
