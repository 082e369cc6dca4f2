"""The notifier interface: one way of telling a person that something happened."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


class NotifyError(Exception):
    """A notifier could not deliver; the message says where and why."""


class Notifier(ABC):
    """Delivers one message; raises NotifyError when it cannot. Called off the run's thread."""

    name: str = "notifier"

    @abstractmethod
    def send(self, message: str, payload: dict[str, Any]) -> None:
        """Deliver `message` (one paragraph for a person) with `payload` (JSON-able details)."""
