"""The event vocabulary: every type loopd writes to `state/events.jsonl`, and its fields.

`Event` names the types (docs/events.md is generated from it and the models:
`python -m daemon.state.eventdoc`); each type's model in the concept modules says its fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from typing import Any

from pydantic import ValidationError

from daemon.state.eventtypes.base import MODELS, EventFields
from daemon.state.eventtypes.names import Event

__all__ = ["Event", "EventFields", "UnknownEvent", "event_type", "fields_problem", "models"]
# The modules of the models, by concept; each registers its types in MODELS as it is imported.
CONCEPTS = ("runs", "desk", "gitland", "rules", "people", "triggers", "service", "aftermath")


def models() -> dict[Event, type[EventFields]]:
    """Every event type's model.

    The concept modules are imported here, at the first event, not with the package: a
    command that writes no event (`loopd status`) does not pay for building 113 models."""
    for name in CONCEPTS:
        import_module(f"{__name__}.{name}")
    return MODELS


class UnknownEvent(ValueError):
    """An event type no member of `Event` names: a mistake in loopd, never the user's."""


def event_type(value: str) -> Event:
    """`value` as its member of Event; UnknownEvent when it is none."""
    try:
        return Event(value)
    except ValueError:
        raise UnknownEvent(
            f"unknown event type {value!r}: add it to Event and give it a model "
            "(daemon/state/eventtypes/)"
        ) from None


def fields_problem(event: Event, fields: Mapping[str, Any]) -> str:
    """What is wrong with an event's fields against its model, in one line; "" when nothing."""
    try:
        models()[event].model_validate(dict(fields))
    except ValidationError as exc:
        wrong = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(fields)'}: {err['msg']}"
            for err in exc.errors()
        )
        return f"event {event.value}: {wrong}"
    return ""
