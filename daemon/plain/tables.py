"""Write daemon/plain/generated.py, the plain path's tables of fields and vocabularies, from
the models they copy: `python -m daemon.plain.tables` (`--check`: fail when it is stale).

The plain path reads state files without importing the models (it answers in milliseconds
where the models take a tenth of a second), so it needs the models' fields, defaults and
closed vocabularies as plain data. They are generated here, as docs/configuration.md's key
tables and docs/events.md are, and a test runs `--check`: a field added to a model and not
to the tables fails CI instead of being read wrong.
"""

from __future__ import annotations

import argparse
import enum
import subprocess
import sys
import types
import typing
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from daemon.people.escalation_file import Escalation
from daemon.service.statecap import StateUsage
from daemon.state import records
from daemon.state.pruned import PrunedRun
from daemon.state.queuefile import PendingRun, QueueFile

TARGET = Path(__file__).with_name("generated.py")

# The run files' tables (plain/runfile.py): name -> model, each after the tables it names.
RUN_TABLES: dict[str, type[BaseModel]] = {
    "TRIGGER": records.Trigger,
    "RUN_OVERLAP": records.RunOverlap,
    "RUN_TRIGGER": records.RunTrigger,
    "STALL": records.StallRecord,
    "VIOLATION": records.Violation,
    "TEST_COUNTS": records.TestCounts,
    "ATTEMPT": records.AttemptRecord,
    "EXPERIMENT": records.ExperimentArm,
    "SEEDED": records.SeededFile,
    "EXPOSURE": records.RunExposure,
    "PARK": records.Park,
    "RUN": records.RunRecord,
    "PENDING": PendingRun,
    "QUEUE": QueueFile,
    "PRUNED": PrunedRun,
}
# The status files' tables (plain/records.py's shape: the Python types a value may have).
STATUS_TABLES: dict[str, type[BaseModel]] = {
    "DAEMON_STATUS": records.DaemonStatus,
    "LOOP_STATUS": records.LoopStatus,
    "VERIFIER_STATUS": records.VerifierStatus,
    "BUDGET_STATUS": records.BudgetStatus,
    "STATE_USAGE": StateUsage,
}


def vocabularies() -> dict[str, tuple[str, ...]]:
    """The closed vocabularies the plain path checks values against."""
    return {
        "PHASES": typing.get_args(records.Phase),
        "OUTCOMES": tuple(records.OUTCOMES),
        "TRIGGER_KINDS": _literal(records.Trigger, "kind"),
        "CAUSES": tuple(c.value for c in records.Cause),
        "VIOLATION_KINDS": _literal(records.Violation, "kind"),
        "ISOLATIONS": _literal(records.RunRecord, "isolation"),
    }


def _literal(model: type[BaseModel], field: str) -> tuple[str, ...]:
    return tuple(typing.get_args(model.model_fields[field].annotation))


def _optional(annotation: Any) -> Any | None:
    """The X of `X | None`, or None when `annotation` is not optional."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return inner
    return None


def _default(model: type[BaseModel], field: str, required: str) -> str:
    info = model.model_fields[field]
    if info.is_required():
        return required
    return repr(info.get_default(call_default_factory=True))


class RunKinds:
    """A run file table's kind of an annotation, as Python source: "str", opt(...), many(...), a
    vocabulary's name or a nested table's name."""

    def __init__(self, vocab: dict[str, tuple[str, ...]]) -> None:
        self.by_values = {values: name for name, values in vocab.items()}
        self.tables = {model: name for name, model in RUN_TABLES.items()}

    def of(self, annotation: Any) -> str:
        inner = _optional(annotation)
        if inner is not None:
            return f"opt({self.of(inner)})"
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        if origin is list:
            return f"many({self._item(args[0])})"
        if origin is dict:
            return '"strings"'
        if origin is typing.Literal:
            return self._vocabulary(tuple(args))
        if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
            return self._vocabulary(tuple(m.value for m in annotation))
        if annotation in self.tables:
            return self.tables[annotation]
        simple = {str: "str", int: "int", float: "float", bool: "bool", datetime: "datetime"}
        if annotation in simple:
            return f'"{simple[annotation]}"'
        raise SystemExit(f"daemon/plain/tables.py: no plain kind for {annotation!r}: add one")

    def _item(self, annotation: Any) -> str:
        if annotation == dict[str, Any]:
            return '"table"'
        return self.of(annotation)

    def _vocabulary(self, values: tuple[str, ...]) -> str:
        return self.by_values.get(values, repr(values))


def _status_types(annotation: Any) -> str:
    """plain/records.py's kind of an annotation: the Python types its value may have."""
    if annotation is datetime:
        return "(datetime,)"
    if _optional(annotation) is datetime:
        return "_TIME"
    if typing.get_origin(annotation) is typing.Literal:
        return "(str,)"  # its values are checked where it is read (PHASES)
    origin = typing.get_origin(annotation) or annotation
    names = {str: "str", int: "int", bool: "bool", list: "list", dict: "dict", float: "float"}
    if origin not in names:
        raise SystemExit(f"daemon/plain/tables.py: no status type for {annotation!r}: add one")
    return f"({names[origin]},)"


def _escalation_kind(annotation: Any) -> str:
    """plain/escalations.py's kind: "str", "int", "bool", "datetime" (each also when
    optional) or the strings of a Literal."""
    annotation = _optional(annotation) or annotation
    if typing.get_origin(annotation) is typing.Literal:
        return repr(tuple(typing.get_args(annotation)))
    names = {str: "str", int: "int", bool: "bool", datetime: "datetime"}
    if annotation not in names:
        raise SystemExit(f"daemon/plain/tables.py: no escalation kind for {annotation!r}")
    return f'"{names[annotation]}"'


HEADER = '''"""The plain path's tables of fields and vocabularies, generated from the models by
`python -m daemon.plain.tables` (daemon/plain/tables.py): do not edit by hand.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

# The value of a required field in a table: a file without it does not validate.
REQUIRED = "<required>"
# plain/escalations.py's: a front matter without it is skipped.
ESCALATION_REQUIRED: Any = object()
_TIME = (datetime, type(None))


def opt(kind: Any) -> tuple[str, Any]:
    """The kind `kind | None`."""
    return ("opt", kind)


def many(kind: Any) -> tuple[str, Any]:
    """The kind `list[kind]`."""
    return ("list", kind)


# The closed vocabularies: another value is refused by the models.
'''


def render() -> str:
    """The text of generated.py."""
    vocab = vocabularies()
    out = [HEADER.rstrip("\n")]
    out += [f"{name} = {values!r}" for name, values in vocab.items()]
    out += _run_tables(RunKinds(vocab)) + _status_tables() + _escalation_table()
    return "\n".join(out) + "\n"


def _run_tables(kinds: RunKinds) -> list[str]:
    out = [
        "",
        "# The run files' tables (plain/runfile.py): field -> (kind, default), in model order.",
        "Spec = dict[str, tuple[Any, Any]]",
    ]
    for name, model in RUN_TABLES.items():
        out.append(f"{name}: Spec = {{  # {_where(model)}")
        for field, info in model.model_fields.items():
            kind = kinds.of(info.annotation)
            out.append(f'    "{field}": ({kind}, {_default(model, field, "REQUIRED")}),')
        out.append("}")
    return out


def _status_tables() -> list[str]:
    out = ["", "# plain/records.py: field -> (the types a value may have, default)."]
    for name, model in STATUS_TABLES.items():
        out.append(f"{name}: dict[str, tuple[tuple[type, ...], Any]] = {{  # {_where(model)}")
        for field, info in model.model_fields.items():
            types_ = _status_types(info.annotation)
            # A required field reads as None here; plain/records.py refuses a file without it.
            default = "None" if info.is_required() else _default(model, field, "None")
            out.append(f'    "{field}": ({types_}, {default}),')
        out.append("}")
    return out


def _escalation_table() -> list[str]:
    out = ["", "# plain/escalations.py: field -> (kind, default), in the model's order."]
    out.append(f"ESCALATION: dict[str, tuple[Any, Any]] = {{  # {_where(Escalation)}")
    for field, info in Escalation.model_fields.items():
        kind = _escalation_kind(info.annotation)
        default = _default(Escalation, field, "ESCALATION_REQUIRED")
        out.append(f'    "{field}": ({kind}, {default}),')
    out.append("}")
    return out


def _where(model: type[BaseModel]) -> str:
    return f"{model.__module__.removeprefix('daemon.')}.{model.__name__}"


def _formatted(text: str) -> str:
    """`text` as `ruff format` leaves it, so that the file and the check agree."""
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", str(TARGET), "-"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"ruff format failed on the generated tables: {done.stderr}")
    return done.stdout


def main(argv: list[str] | None = None) -> int:
    """Write generated.py, or with --check say whether it is up to date."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when generated.py is stale")
    parser.add_argument("--target", type=Path, default=TARGET, help="another file to write")
    args = parser.parse_args(argv)
    target: Path = args.target
    text = _formatted(render())
    current = target.read_text(encoding="utf-8") if target.exists() else ""
    if args.check:
        if current != text:
            print(
                f"{target} is stale: a model's fields changed. Run `python -m "
                "daemon.plain.tables` and commit the result.",
                file=sys.stderr,
            )
            return 1
        print(f"{target}: up to date")
        return 0
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
