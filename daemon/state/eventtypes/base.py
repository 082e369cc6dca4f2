"""What every event's model shares, and the table of models by event type."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from daemon.state.eventtypes.names import Event

# A check's command and how it exited, as checks, done_check and setup_finished list them.
CommandResult = dict[str, Any]


class EventFields(BaseModel):
    """The fields of one event type, besides `ts`, `type`, `loop` and `run` which all carry."""

    # A field no model names is a mistake at the call site, as is a misspelled one.
    # Built at its first event, not at import: a command that writes none pays nothing.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)
    type: ClassVar[Event]


MODELS: dict[Event, type[EventFields]] = {}
M = TypeVar("M", bound=type[EventFields])


def fields_of(event: Event) -> Callable[[M], M]:
    """Register the decorated model as the fields of `event`."""

    def register(model: M) -> M:
        if event in MODELS:
            raise ValueError(f"two models for the event type {event}")
        model.type = event
        MODELS[event] = model
        return model

    return register


def described(text: str, default: Any = ...) -> Any:
    """A field with a description for docs/events.md (required without `default`)."""
    return Field(default, description=text)
