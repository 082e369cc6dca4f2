"""The notifier interface: one way of telling a person that something happened."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


class NotifyError(Exception):
    """A notifier could not deliver; the message says where and why."""


class Notifier(ABC):
    """Delivers one message; raises NotifyError when it cannot. Called off the run's thread."""

    name: str = "notifier"

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> Notifier:
        """A plugin's notifier from its `[notify.plugins.NAME]` table: its keys as keyword
        arguments. A plugin overrides this to read and check its own options."""
        try:
            return cls(**options)
        except TypeError as exc:
            raise NotifyError(
                f"loopd.toml: [notify.plugins.{cls.name}]: {exc}. Fix: give the options "
                f"the plugin's documentation names"
            ) from None

    @abstractmethod
    def send(self, message: str, payload: dict[str, Any]) -> None:
        """Deliver `message` (one paragraph for a person) with `payload` (JSON-able details)."""
