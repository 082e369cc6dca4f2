"""Adapters by name."""

from __future__ import annotations

import importlib

from daemon.agents.base import AgentAdapter

_MODULES = {
    "command": ("daemon.agents.command", "CommandAdapter"),
    "qwen": ("daemon.agents.qwen", "QwenAdapter"),
    "claude": ("daemon.agents.claude", "ClaudeAdapter"),
    "codex": ("daemon.agents.codex", "CodexAdapter"),
    "opencode": ("daemon.agents.opencode", "OpencodeAdapter"),
    "gemini": ("daemon.agents.gemini", "GeminiAdapter"),
    "aider": ("daemon.agents.aider", "AiderAdapter"),
}


def adapter_class(name: str) -> type[AgentAdapter]:
    """The adapter class registered under `name`."""
    try:
        module_name, class_name = _MODULES[name]
    except KeyError:
        raise KeyError(f"no agent adapter {name!r}; known: {', '.join(sorted(_MODULES))}") from None
    return getattr(importlib.import_module(module_name), class_name)


def adapter_names() -> list[str]:
    return sorted(_MODULES)
