"""docs/events.md, from the event types and their models: `python -m daemon.state.eventdoc`."""

from __future__ import annotations

import inspect
import sys
import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from pydantic.fields import FieldInfo

from daemon.state.eventtypes import Event, models
from daemon.state.records import Outcome, Phase, TriggerKind

DOC = Path(__file__).resolve().parents[2] / "docs" / "events.md"
# Literals too long for a table cell: named there, their values listed once at the end.
NAMED: dict[tuple[Any, ...], str] = {
    typing.get_args(Outcome): "outcome",
    typing.get_args(Phase): "phase",
    typing.get_args(TriggerKind): "trigger kind",
}

HEAD = """# Events

`state/events.jsonl` (and a worker's `state/worker-events.jsonl`) is loopd's audit log: one
JSON object a line, appended, rotated to `events-N.jsonl` past `[limits] events_rotate`.
Every line has

| field | type | meaning |
|---|---|---|
| `ts` | str | when it was written, UTC (`2026-11-29T02:14:00.123456Z`) |
| `type` | str | one of the types below |
| `loop` | str or null | the loop it concerns, if one |
| `run` | str or null | the run it concerns, if one |

and the fields of its type. A field marked *optional* is absent from some lines of that type
(or written empty). New types and fields may appear; the meaning of those listed stays.

This page is generated from `daemon/state/eventtypes/` by `python -m daemon.state.eventdoc`
(a test fails when it is out of date): edit the models, not this page.
"""


TABLE = "| field | type | meaning |\n|---|---|---|\n"


def type_text(annotation: Any) -> str:
    """A field's type as the JSON shows it, in Python's words."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal and args in NAMED:
        return f"[{NAMED[args]}](#values)"
    if origin is Literal:
        return " \\| ".join(f'"{a}"' for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(type_text(a) for a in args)
    if origin is not None:
        inner = ", ".join(type_text(a) for a in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    if annotation is type(None):
        return "null"
    if annotation is Any:
        return "any"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "str"
    return getattr(annotation, "__name__", str(annotation))


def field_row(name: str, info: FieldInfo) -> str:
    """One field of one event type as a table row."""
    meaning = info.description or ""
    if not info.is_required():
        meaning = f"*optional* {meaning}".rstrip()
    return f"| `{info.alias or name}` | {type_text(info.annotation)} | {meaning} |"


def sections() -> list[tuple[str, list[Event]]]:
    """The event types under the headings of Event's comments, in its order."""
    out: list[tuple[str, list[Event]]] = []
    for line in inspect.getsource(Event).splitlines():
        stripped = line.strip()
        if stripped.startswith("# "):
            out.append((stripped[2:], []))
        elif "=" in stripped and out:
            name = stripped.split("=", 1)[0].strip()
            if name in Event.__members__:
                out[-1][1].append(Event[name])
    listed = [e for _, members in out for e in members]
    if sorted(listed) != sorted(Event):
        raise ValueError("every Event member goes under a `# heading` comment, once")
    return out


def render() -> str:
    """The whole of docs/events.md."""
    parts = [HEAD]
    for heading, members in sections():
        parts.append(f"\n## {heading}\n")
        for event in members:
            model = models()[event]
            meaning = (model.__doc__ or "").strip().splitlines()[0]
            parts.append(f"\n### `{event.value}`\n\n{meaning}\n")
            rows = [field_row(n, f) for n, f in model.model_fields.items()]
            if rows:
                parts.append(f"\n{TABLE}" + "\n".join(rows) + "\n")
    used = [(v, n) for v, n in NAMED.items() if any(f"[{n}]" in part for part in parts)]
    parts.append("\n## Values\n\n")
    for values, name in used:
        parts.append(f"- {name}: " + ", ".join(f"`{v}`" for v in values) + "\n")
    return "".join(parts)


def main(argv: list[str]) -> int:
    """Write docs/events.md (or the path given); --check: exit 1 when it is not current."""
    check = "--check" in argv
    rest = [arg for arg in argv if arg != "--check"]
    if any(arg.startswith("-") for arg in rest) or len(rest) > 1:
        # Never a file named after an option (`--help` once wrote one).
        print("usage: python -m daemon.state.eventdoc [--check] [PATH]", file=sys.stderr)
        return 2
    path = Path(rest[0]) if rest else DOC
    text = render()
    if check:
        current = path.exists() and path.read_text(encoding="utf-8") == text
        print(f"{path} is current" if current else f"{path} is stale: run without --check")
        return 0 if current else 1
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
