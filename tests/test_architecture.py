"""The import graph of daemon/: no circles; imports point down the layers (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "daemon"

# Top to bottom, as DEVELOPERS.md lists them: a module may import its own layer and those below.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # The plain tables' generator is a command: it reads the models the plain path must not.
    # The console runs the commands' own readers and actions (daemon/web/), so it sits with them.
    ("commands", ("daemon.cli", "daemon.plain.tables", "daemon.web")),
    ("engines", ("daemon.engine",)),
    ("daemon", ("daemon.daemon", "daemon.service", "daemon.systemd", "daemon.housekeeping")),
    ("experiments", ("daemon.experiments",)),
    ("calibration", ("daemon.calibration",)),
    # A landed run followed on its target: reads the run's record and git, teaches through runs.
    ("aftermath", ("daemon.aftermath",)),
    ("runs", ("daemon.runs",)),
    ("landing", ("daemon.landing",)),
    # What landing re-verifies with and records through: the run's parts below its lifecycle.
    ("run parts", ("daemon.runparts",)),
    ("triggers", ("daemon.scheduling",)),
    ("agents", ("daemon.agents",)),
    ("people", ("daemon.people",)),
    ("rules", ("daemon.rules",)),
    ("model", ("daemon.model",)),
    ("sandboxes", ("daemon.sandbox",)),
    # Registers its profile and its repository with the configuration, and makes that repository.
    ("example", ("daemon.example",)),
    ("foundations", ("daemon.config", "daemon.units", "daemon.home")),
    ("git", ("daemon.git",)),
    # The read commands' plain path: the home's files as plain TOML and JSON, no models.
    ("plain reads", ("daemon.plain",)),
    ("state", ("daemon.state",)),
    (
        "basics",
        (
            "daemon.clock",
            "daemon.redact",
            "daemon.redaction",
            "daemon.retry",
            "daemon.regularfile",
            "daemon.globs",
            "daemon.stats",
            "daemon.homepath",
            "daemon.sizes",
            "daemon.extras",
            "daemon.excerpt",
            # Process groups, pids and their marks: the agents', the checks', landing's pushes.
            "daemon.processes",
            # glibc's arenas and malloc_trim for the long-lived daemon.
            "daemon.allocator",
            "daemon",
        ),
    ),
]

# The known exceptions of DEVELOPERS.md: (importer, imported) -> why it is allowed.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {
    ("daemon.config.loop_file", "daemon.scheduling.cron"): (
        "cron expressions and time zones are validated where a loop file is read; "
        "cron.py imports nothing of loopd"
    ),
    ("daemon.config.home_file", "daemon.scheduling.cron"): (
        "loopd.toml's time zone is validated where it is read; cron.py imports nothing of loopd"
    ),
}


def module_name(path: Path) -> str:
    """The dotted name of a file under daemon/."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of the package by its dotted name."""
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The loopd modules a module imports anywhere in it: top level, functions, TYPE_CHECKING."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                drop = node.level - 1 if is_package else node.level
                anchor = anchor[: len(anchor) - drop] if drop else anchor
                base = ".".join(anchor + ([base] if base else []))
            # `from package import submodule` imports the submodule; a name imports the package.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            # `import daemon.a.b` names a module; keep the longest prefix that is one.
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target.startswith("daemon") and target != name:
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    """Each module of daemon/ and the loopd modules it imports."""
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def layer_of(name: str) -> int:
    """The index of a module's layer in LAYERS (0 is the top); the longest prefix decides."""
    best, best_len = len(LAYERS), -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    return best


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop()
                if nxt not in edges:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(edges[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def upward(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports from a lower layer to a higher one, the known exceptions left out."""
    return sorted(
        (src, dst)
        for src, targets in edges.items()
        for dst in targets
        if layer_of(dst) < layer_of(src) and (src, dst) not in ALLOWED_UPWARD
    )


def test_every_module_has_a_layer() -> None:
    """A new package under daemon/ is placed in LAYERS (and in docs/architecture.md)."""
    assert [m for m in modules() if layer_of(m) == len(LAYERS)] == []


def test_no_circles() -> None:
    """No module imports, through any chain, a module that imports it."""
    assert circles(graph()) == []


def test_imports_point_down() -> None:
    """No module imports from a layer above its own, but for the listed exceptions."""
    assert upward(graph()) == []


def test_known_exceptions_still_exist() -> None:
    """An exception that no longer happens is removed from the list, so it stays honest."""
    edges = graph()
    assert [pair for pair in ALLOWED_UPWARD if pair[1] not in edges.get(pair[0], set())] == []


def test_no_module_is_over_500_lines() -> None:
    """One concept per module: a module that grows past 500 lines is split by concept."""
    long = {
        name: n
        for name, path in modules().items()
        if (n := len(path.read_text().splitlines())) > 500
    }
    assert long == {}


MAX_FUNCTION_LINES = 60


def long_functions(name: str, source: str) -> dict[str, int]:
    """The functions and methods (nested ones too) of a module longer than
    MAX_FUNCTION_LINES, by `module:line name`, with their lengths."""
    return {
        f"{name}:{node.lineno} {node.name}": n
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (n := (node.end_lineno or node.lineno) - node.lineno + 1) > MAX_FUNCTION_LINES
    }


def test_no_function_is_over_60_lines() -> None:
    """Small functions: one that grows past 60 lines is split into well-named helpers."""
    long = {}
    for name, path in modules().items():
        long.update(long_functions(name, path.read_text()))
    assert long == {}, (
        f"functions over {MAX_FUNCTION_LINES} lines (def to last line, decorators not "
        f"counted): {long}. Fix: split each into well-named helpers (a step, a loop's body, "
        "the block that builds one value, each a function named for what it is), keeping "
        "behaviour, output and the order of side effects; do not raise the limit"
    )


def test_the_check_sees_a_circle_and_an_upward_import() -> None:
    """The checks find what they are for, on a made-up graph."""
    edges = {
        "daemon.state.a": {"daemon.runs.b"},
        "daemon.runs.b": {"daemon.state.a"},
        "daemon.cli.c": {"daemon.runs.b"},
    }
    assert circles(edges) == [["daemon.runs.b", "daemon.state.a"]]
    assert upward(edges) == [("daemon.state.a", "daemon.runs.b")]


def made_up_function(name: str, lines: int, indent: str = "") -> str:
    """The source of a function `lines` long, its `def` line included."""
    body = "".join(f"{indent}    x = {i}\n" for i in range(lines - 1))
    return f"{indent}def {name}():\n{body}"


def test_the_check_sees_a_long_function_and_method() -> None:
    """The length check finds what it is for, on made-up source."""
    limit = MAX_FUNCTION_LINES
    source = (
        made_up_function("short", limit)
        + made_up_function("long", limit + 1)
        + "class C:\n"
        + made_up_function("method", limit + 1, "    ")
    )
    assert long_functions("m", source) == {
        f"m:{limit + 1} long": limit + 1,
        f"m:{2 * limit + 3} method": limit + 1,
    }
