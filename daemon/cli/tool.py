"""`loopd-tool`: the agent's tools for agents without MCP (aider, `command`), on its PATH.

`loopd-tool record-evidence --claim "..." --command "pytest -q"`: the same operations as
`loopd mcp`, with `--flag value` arguments named as the tools' parameters (a list parameter
is given once per item: `--paths a.py --paths b.py`). The answer is printed; the exit code
is 0 when the desk did what was asked, 1 when it refused, 2 on a usage error.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from daemon.agents.deskwire import TOOLS, description
from daemon.cli.mcp import ToolFailed, call

USAGE = "usage: loopd-tool TOOL --PARAMETER VALUE ...; tools: " + ", ".join(
    name.replace("_", "-") for name in TOOLS
)


class HelpAsked(ValueError):
    """-h or --help: the usage, printed on stdout, exit 0."""


def parse(argv: list[str]) -> tuple[str, dict[str, Any]]:
    """The tool and its arguments from `TOOL --name value ...`; ValueError with the usage."""
    if not argv:
        raise ValueError(USAGE)
    if argv[0] in ("-h", "--help"):
        raise HelpAsked(USAGE)
    tool = argv[0].replace("-", "_")
    if tool not in TOOLS:
        raise ValueError(f"unknown tool {argv[0]!r}; {USAGE}")
    model = TOOLS[tool]
    arguments: dict[str, Any] = {}
    rest = argv[1:]
    if rest and rest[0] in ("-h", "--help"):
        flags = " ".join(f"--{name} VALUE" for name in model.model_fields)
        raise HelpAsked(f"loopd-tool {argv[0]} {flags}\n{description(tool)}")
    while rest:
        flag, *rest = rest
        name = flag[2:].replace("-", "_") if flag.startswith("--") else ""
        if name not in model.model_fields:
            raise ValueError(
                f"{argv[0]}: unknown flag {flag!r}; its flags: "
                + ", ".join(f"--{n}" for n in model.model_fields)
            )
        if not rest:
            raise ValueError(f"{argv[0]}: {flag} needs a value")
        value, *rest = rest
        if _is_list(model, name):
            arguments.setdefault(name, []).append(value)
        else:
            arguments[name] = value
    return tool, arguments


def _is_list(model: Any, name: str) -> bool:
    return getattr(model.model_fields[name].annotation, "__origin__", None) is list


def main(argv: list[str] | None = None) -> int:
    try:
        tool, arguments = parse(sys.argv[1:] if argv is None else argv)
    except HelpAsked as exc:
        print(exc)
        return 0
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    try:
        print(call(tool, arguments, os.environ))
    except ToolFailed as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
