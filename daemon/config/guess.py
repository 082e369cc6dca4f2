"""What a repository suggests for a loop file (`loopd new`): its test command, the folders of
its tests, its project's venv, each with where it was found.

Read from the commit at HEAD (`git ls-tree`, `git cat-file`), which is what a run's clone
holds, so a file that is not committed suggests nothing; only the project's venv, never
committed, is looked for in the folder itself. The test command, first found first:

1. pytest, where it is configured or present: pyproject.toml `[tool.pytest.ini_options]`,
   `pytest.ini`, setup.cfg `[tool:pytest]`, tox.ini `[pytest]`, a `conftest.py`, pytest
   among pyproject.toml's or a requirements file's dependencies, a `tests/` folder holding
   `test_*.py`, or a pytest in the project's venv;
2. package.json's `scripts.test` (not npm's placeholder, "no test specified"): `npm test`;
3. a Makefile's `test:` (else `check:`) target: `make test`;
4. go.mod: `go test ./...`;
5. Cargo.toml: `cargo test`;
6. other Python (pyproject.toml, setup.py, setup.cfg, test*.py files): `python3 -m unittest`.

The others found are kept as alternatives, which the loop file shows in comments.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path, PurePosixPath

from pydantic import BaseModel

from daemon.git.safe import Git, GitError

FILE_CAP = 1_000_000  # bytes of one file read to guess from (a package.json, a Makefile)
TEST_FOLDERS = ("tests", "test", "spec", "__tests__", "testing")
VENVS = (".venv", "venv")
NPM_PLACEHOLDER = "no test specified"
MAKE_TARGET = re.compile(r"^(?P<target>test|check)\s*:(?!=)", re.M)
REQUIREMENT = re.compile(r"^\s*pytest\b", re.M | re.I)
LOCKS = {  # the lock file a JavaScript project keeps: how its dependencies are installed
    "package-lock.json": "npm ci",
    "npm-shrinkwrap.json": "npm ci",
    "yarn.lock": "yarn install --frozen-lockfile",
    "pnpm-lock.yaml": "pnpm install --frozen-lockfile",
}


class Found(BaseModel):
    """One guess and where it came from, as the loop file's comment says it."""

    value: str  # a command, a glob or a folder
    source: str


class Guess(BaseModel):
    """What the repository at HEAD suggests."""

    repo: Path  # the repository's top folder
    branch: str  # HEAD's branch ("" when detached)
    checks: list[Found] = []  # the first is the one chosen
    setup: list[Found] = []
    protect: list[Found] = []
    venv: Found | None = None  # a Python project's own venv: its bin folder


class NotARepository(Exception):
    """The path is no repository a loop can work on; the message says why and what to do."""


def guess(path: Path) -> Guess:
    """What the git repository at `path` suggests for a loop; NotARepository when it is none."""
    repo = _top(path)
    git = Git(repo, plain=True)
    try:
        git.out("rev-parse", "--verify", "HEAD^{commit}")
    except GitError:
        raise NotARepository(
            f"{repo} has no commits yet: a run starts from a commit; commit your files first "
            "(`git add -A && git commit -m start`)"
        ) from None
    branch = git.out("symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    listing = git.run("ls-tree", "-r", "-z", "--name-only", "HEAD").stdout
    files = [name.decode("utf-8", "replace") for name in listing.split(b"\0") if name]
    tree = _Tree(git, set(files))
    out = Guess(repo=repo, branch=branch)
    venv = _venv(repo)
    out.checks = _checks(tree, venv)
    if any(check.value.startswith("python3 ") for check in out.checks):
        out.venv = venv  # its python3 first for the checks and the agent: a Python project's
    out.setup = _setup(tree, out.checks)
    out.protect = _protect(files)
    return out


def _top(path: Path) -> Path:
    """The repository's top folder; NotARepository for a folder that is none, or is inside one."""
    path = path.expanduser().resolve()
    if not path.is_dir():
        raise NotARepository(f"{path} is not a folder: name the folder of a git repository")
    done = Git(path, plain=True).run("rev-parse", "--show-toplevel", check=False)
    if done.returncode != 0:
        raise NotARepository(
            f"{path} is not a git repository: loopd works on branches of one; run "
            f"`git -C {path} init && git -C {path} add -A && git -C {path} commit -m start`"
        )
    top = Path(done.stdout.decode("utf-8", "replace").strip()).resolve()
    if top != path:
        raise NotARepository(
            f"{path} is inside the git repository {top}: a loop works on a whole repository; "
            f"name its top folder (--repo {top})"
        )
    return path


class _Tree:
    """The files of HEAD, read through git."""

    def __init__(self, git: Git, files: set[str]) -> None:
        self.git, self.files = git, files

    def has(self, name: str) -> bool:
        return name in self.files

    def text(self, name: str) -> str:
        """The file's text at HEAD, "" when it is not there or too large to read."""
        if name not in self.files:
            return ""
        size = self.git.out("cat-file", "-s", f"HEAD:{name}", check=False)
        if not size.isdigit() or int(size) > FILE_CAP:
            return ""
        return self.git.run("cat-file", "blob", f"HEAD:{name}").stdout.decode("utf-8", "replace")


def _venv(repo: Path) -> Found | None:
    """The project's own venv in its folder (never committed): its bin folder."""
    for name in VENVS:
        bin_dir = repo / name / "bin"
        if (bin_dir / "python3").exists() or (bin_dir / "python").exists():
            return Found(value=str(bin_dir), source=f"{repo / name}, the project's venv")
    return None


def _checks(tree: _Tree, venv: Found | None) -> list[Found]:
    """Every test command the files suggest, the one to use first."""
    found: list[Found] = []
    pytest_source = _pytest(tree, venv)
    if pytest_source:
        found.append(Found(value="python3 -m pytest -q", source=pytest_source))
    npm = _npm_test(tree)
    if npm:
        found.append(npm)
    make = MAKE_TARGET.findall(tree.text("Makefile") or tree.text("makefile"))
    if make:
        target = "test" if "test" in make else "check"
        name = "Makefile" if tree.has("Makefile") else "makefile"
        found.append(Found(value=f"make {target}", source=f"{name}, its `{target}:` target"))
    if tree.has("go.mod"):
        found.append(Found(value="go test ./...", source="go.mod"))
    if tree.has("Cargo.toml"):
        found.append(Found(value="cargo test", source="Cargo.toml"))
    if not pytest_source:
        python = _python_project(tree)
        if python:
            found.append(Found(value="python3 -m unittest -q", source=python))
    return found


def _pytest(tree: _Tree, venv: Found | None) -> str:
    """Where the repository says it runs pytest ("" when it does not)."""
    pyproject = _toml(tree.text("pyproject.toml"))
    pytest_table = pyproject.get("tool", {}).get("pytest", {})
    if isinstance(pytest_table, dict) and "ini_options" in pytest_table:
        return "pyproject.toml [tool.pytest.ini_options]"
    if pytest_table:
        return "pyproject.toml [tool.pytest]"
    if tree.has("pytest.ini"):
        return "pytest.ini"
    if re.search(r"^\[tool:pytest\]", tree.text("setup.cfg"), re.M):
        return "setup.cfg [tool:pytest]"
    if re.search(r"^\[pytest\]", tree.text("tox.ini"), re.M):
        return "tox.ini [pytest]"
    if tree.has("conftest.py") or any(f"{d}/conftest.py" in tree.files for d in TEST_FOLDERS):
        return "conftest.py"
    named = _pytest_dependency(pyproject)
    if named:
        return f"pyproject.toml {named} names pytest"
    for name in sorted(tree.files):
        if "/" not in name and name.startswith("requirements") and name.endswith(".txt"):
            if REQUIREMENT.search(tree.text(name)):
                return f"{name} names pytest"
    for folder in TEST_FOLDERS:
        if any(_is_test_file(f) and f.startswith(f"{folder}/") for f in tree.files):
            return f"{folder}/ holds test_*.py files"
    if venv is not None and any(Path(venv.value).glob("../lib/python*/site-packages/pytest")):
        return f"pytest is installed in {venv.source}"
    return ""


def _pytest_dependency(pyproject: dict) -> str:
    """Which of pyproject.toml's dependency tables names pytest ("" when none)."""
    tables: list[tuple[str, object]] = [
        (
            "[project.optional-dependencies]",
            pyproject.get("project", {}).get("optional-dependencies"),
        ),
        ("[dependency-groups]", pyproject.get("dependency-groups")),
    ]
    poetry = pyproject.get("tool", {}).get("poetry", {})
    if isinstance(poetry, dict):
        tables.append(("[tool.poetry.dev-dependencies]", poetry.get("dev-dependencies")))
        for group, table in (poetry.get("group") or {}).items():
            if isinstance(table, dict):
                tables.append((f"[tool.poetry.group.{group}]", table.get("dependencies")))
    for name, table in tables:
        if isinstance(table, dict):
            values = [*table.keys(), *(v for v in table.values() if isinstance(v, list))]
            flat = [str(x) for v in values for x in (v if isinstance(v, list) else [v])]
            if any(re.match(r"pytest\b", item.strip(), re.I) for item in flat):
                return name
    return ""


def _npm_test(tree: _Tree) -> Found | None:
    """package.json's test script, unless it is npm's placeholder."""
    try:
        package = json.loads(tree.text("package.json") or "{}")
    except ValueError:
        return None
    scripts = package.get("scripts") if isinstance(package, dict) else None
    script = scripts.get("test") if isinstance(scripts, dict) else None
    if not isinstance(script, str) or not script.strip() or NPM_PLACEHOLDER in script:
        return None
    return Found(value="npm test", source=f"package.json scripts.test ({script[:60]!r})")


def _python_project(tree: _Tree) -> str:
    """What makes the repository a Python project ("" when nothing does)."""
    for name in ("pyproject.toml", "setup.py", "setup.cfg"):
        if tree.has(name):
            return f"{name} (a Python project; no pytest configured)"
    tests = sorted(f for f in tree.files if _is_test_file(f))
    if tests:
        return f"{tests[0]} (Python tests; no pytest configured)"
    return ""


def _setup(tree: _Tree, checks: list[Found]) -> list[Found]:
    """What a run's fresh clone needs before its checks: a JavaScript project's packages."""
    if not checks or checks[0].value != "npm test":
        return []
    try:
        package = json.loads(tree.text("package.json") or "{}")
    except ValueError:
        return []
    if not (package.get("dependencies") or package.get("devDependencies")):
        return []
    for lock, command in LOCKS.items():
        if tree.has(lock):
            return [Found(value=command, source=f"{lock} (package.json's dependencies)")]
    return [Found(value="npm install", source="package.json's dependencies (no lock file)")]


def _protect(files: list[str]) -> list[Found]:
    """Globs on the repository's tests: its test folders, then test files elsewhere."""
    out: list[Found] = []
    folders = []
    for folder in TEST_FOLDERS:
        count = sum(1 for f in files if f.startswith(f"{folder}/"))
        if count:
            folders.append(folder)
            noun = "file" if count == 1 else "files"
            out.append(Found(value=f"{folder}/**", source=f"the folder {folder}/ ({count} {noun})"))
    rest = [f for f in files if not any(f.startswith(f"{d}/") for d in folders)]
    kinds = (
        ("**/*_test.go", lambda n: n.endswith("_test.go"), "Go's *_test.go files"),
        ("**/test_*.py", lambda n: _is_test_file(n) and "test_" in n, "test_*.py files"),
        ("**/*_test.py", lambda n: n.endswith("_test.py"), "*_test.py files"),
        ("**/*.test.*", lambda n: ".test." in PurePosixPath(n).name, "*.test.* files"),
        ("**/*.spec.*", lambda n: ".spec." in PurePosixPath(n).name, "*.spec.* files"),
    )
    for glob, matches, what in kinds:
        count = sum(1 for f in rest if matches(f))
        if count:
            where = " outside those folders" if folders else ""
            out.append(Found(value=glob, source=f"{what}{where} ({count})"))
    return out


def _is_test_file(name: str) -> bool:
    base = PurePosixPath(name).name
    return base.startswith("test_") and base.endswith(".py")


def _toml(text: str) -> dict:
    try:
        return tomllib.loads(text) if text else {}
    except tomllib.TOMLDecodeError:
        return {}
