"""`loopd new NAME --repo PATH` and `loopd init --repo PATH`: a loop file guessed from a real
git repository of each kind (Python with pytest, npm, make, go, cargo), commented with where
each guess came from, passing `loopd check`, its checks probed in the sandbox; and a loop so
written run end to end by `loopd once` with a real command agent. loopd as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from daemon.config.guess import guess
from tests.helpers import git, loopd, make_home, make_repo
from tests.machines import command_agent
from tests.test_setup_skip import wheels

CALC = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "tests/test_calc.py": "import sys, pathlib\n"
    "sys.path.insert(0, str(pathlib.Path(__file__).parent.parent))\n"
    "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    ".gitignore": ".venv/\n",
}
PYTEST_TABLE = '[project]\nname = "calc"\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
FIXER = (
    "import pathlib\n"
    "p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
)
NPM_DEFAULT = 'echo "Error: no test specified" && exit 1'


def _home(tmp_path: Path, config: str = "") -> Path:
    return make_home(tmp_path / "home", config)


def _loop(home: Path, name: str) -> dict:
    return tomllib.loads((home / "loops" / f"{name}.toml").read_text())


def _said(home: Path, name: str) -> str:
    """The loop file's words, its comments' `#` and line breaks (comments wrap) left out."""
    return " ".join((home / "loops" / f"{name}.toml").read_text().replace("#", " ").split())


def _venv(repo: Path, with_pytest: bool) -> Path:
    """A real venv in the repository's folder (ignored by git), the project's own: with
    pytest (its pure wheels, `.ci/run`'s test wheels, unpacked into its site-packages: a
    .pth into loopd's own venv would be hidden by the sandbox where that venv is under /tmp)
    or without."""
    folder = repo / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    if with_pytest:
        site = next((folder / "lib").glob("python3*/site-packages"))
        for name in ("pytest", "pluggy", "iniconfig", "packaging", "pygments"):
            (wheel,) = wheels().glob(f"{name}-*.whl")
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(site)
    return folder / "bin"


def test_each_kind_of_repository_gets_its_test_command_and_passes_check(tmp_path: Path) -> None:
    repos = {
        "py": make_repo(tmp_path / "py", {**CALC, "pyproject.toml": PYTEST_TABLE}),
        "web": make_repo(
            tmp_path / "web",
            {
                "package.json": json.dumps(
                    {"name": "web", "scripts": {"test": "node --test"}, "devDependencies": {}}
                ),
                "__tests__/sum.test.js": "",
                "src/sum.js": "",
            },
        ),
        "mk": make_repo(
            tmp_path / "mk",
            {
                # npm's placeholder is no test command: the Makefile's target is used
                "package.json": json.dumps({"scripts": {"test": NPM_DEFAULT}}),
                "Makefile": "CC := cc\ncheck:\n\t./check.sh\n",
                "test/run.sh": "",
            },
        ),
        "gomod": make_repo(
            tmp_path / "gomod",
            {"go.mod": "module example.com/x\n\ngo 1.21\n", "x.go": "", "x_test.go": ""},
        ),
        "crate": make_repo(
            tmp_path / "crate",
            {"Cargo.toml": '[package]\nname = "c"\n', "src/lib.rs": "", "tests/it.rs": ""},
        ),
    }
    home = _home(tmp_path, command_agent("fixer", FIXER))
    for name, repo in repos.items():
        proc = loopd(home, "new", name, "--repo", str(repo), "--no-probe")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"wrote {home / 'loops' / f'{name}.toml'}" in proc.stdout
        assert "agent: fixer (the only agent profile of loopd.toml)" in proc.stdout
        assert f"loopd --home {home} once {name}" in proc.stdout  # what to run next
    expected = {
        "py": (["python3 -m pytest -q"], "pyproject.toml [tool.pytest.ini_options]", ["tests/**"]),
        "web": (["npm test"], "package.json scripts.test ('node --test')", ["__tests__/**"]),
        "mk": (["make check"], "Makefile, its `check:` target", ["test/**"]),
        "gomod": (["go test ./..."], "go.mod", ["**/*_test.go"]),
        "crate": (["cargo test"], "Cargo.toml", ["tests/**"]),
    }
    for name, (checks, source, protect) in expected.items():
        loop = _loop(home, name)
        assert (loop["done_when"], loop["protect"]) == (checks, protect), (name, loop)
        assert loop["repo"] == str(repos[name]) and loop["agent"] == "fixer"
        text = _said(home, name)
        assert f"the checks, all must exit 0: from {source} done_when = " in text, text
        assert "the agent may not change these: from the folder" in text or name == "gomod"
    assert "# also found" not in (home / "loops" / "py.toml").read_text()
    checked = loopd(home, "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "5 valid loop(s): crate, gomod, mk, py, web; 0 error(s)" in checked.stdout


def test_pytest_is_found_where_a_python_project_says_so(tmp_path: Path) -> None:
    tests = {"tests/test_a.py": "def test_a():\n    pass\n"}
    cases = {
        "pytest.ini": ({"pytest.ini": "[pytest]\n", "a.py": ""}, "pytest.ini"),
        "setup.cfg": ({"setup.cfg": "[tool:pytest]\n", "a.py": ""}, "setup.cfg [tool:pytest]"),
        "tox.ini": ({"tox.ini": "[tox]\n[pytest]\n", "a.py": ""}, "tox.ini [pytest]"),
        "deps": (
            {
                "pyproject.toml": '[project]\nname = "a"\n'
                '[project.optional-dependencies]\ntest = ["pytest>=8"]\n'
            },
            "pyproject.toml [project.optional-dependencies] names pytest",
        ),
        "folder": (tests, "tests/ holds test_*.py files"),
    }
    for name, (files, source) in cases.items():
        found = guess(make_repo(tmp_path / name, files))
        assert (found.checks[0].value, found.checks[0].source) == (
            "python3 -m pytest -q",
            source,
        ), name
    # A pytest installed in the project's venv (in its folder, never committed)
    venv = make_repo(tmp_path / "venv", {"a.py": "", ".gitignore": ".venv/\n"})
    (venv / ".venv" / "lib" / "python3.11" / "site-packages" / "pytest").mkdir(parents=True)
    (venv / ".venv" / "bin").mkdir()
    (venv / ".venv" / "bin" / "python3").symlink_to(sys.executable)
    found = guess(venv)
    assert found.checks[0].value == "python3 -m pytest -q", found
    assert found.checks[0].source == f"pytest is installed in {venv / '.venv'}, the project's venv"
    assert found.venv is not None and found.venv.value == str(venv / ".venv" / "bin")
    # A Python project with no pytest anywhere: unittest, said so
    plain = guess(make_repo(tmp_path / "plain", {"setup.py": "", "test_x.py": ""}))
    assert plain.checks[0].value == "python3 -m unittest -q"
    assert "no pytest configured" in plain.checks[0].source
    assert [p.value for p in plain.protect] == ["**/test_*.py"]
    # Several found: the first chosen, the others kept as alternatives; npm's dependencies
    # installed first in each run's clone
    both = make_repo(
        tmp_path / "both",
        {
            "package.json": json.dumps(
                {"scripts": {"test": "jest"}, "devDependencies": {"jest": "1"}}
            ),
            "package-lock.json": "{}",
            "Makefile": "test:\n\tnpm test\n",
        },
    )
    found = guess(both)
    assert [c.value for c in found.checks] == ["npm test", "make test"]
    assert [s.value for s in found.setup] == ["npm ci"]


def test_a_written_loop_runs_end_to_end_with_loopd_once(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "calc", {**CALC, "pyproject.toml": PYTEST_TABLE})
    bin_dir = _venv(repo, with_pytest=True)
    home = _home(tmp_path, command_agent("fixer", FIXER))
    proc = loopd(home, "new", "calc", "--repo", str(repo), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "the checks run in the sandbox: 0 of 1 pass on its base" in proc.stdout, (
        proc.stdout + proc.stderr
    )
    loop = _loop(home, "calc")
    assert loop["env"] == {"PATH": f"{bin_dir}:{{PATH}}"}, loop
    said = _said(home, "calc")
    assert f"the checks' and agent's python3 and pytest first from {repo / '.venv'}" in said
    run = loopd(home, "once", "calc", timeout=300)
    run_id = run.stdout.split()[0]
    record = tomllib.loads((home / "state" / "runs" / run_id / "run.toml").read_text())
    assert (record["outcome"], record["cause"]) == ("succeeded", "passed"), run.stdout + run.stderr
    assert "a + b" in git(repo, "show", f"{record['branch']}:calc.py")


def test_the_probe_names_an_environment_failure_and_the_file_stays(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "calc", {**CALC, "pyproject.toml": PYTEST_TABLE})
    bin_dir = _venv(repo, with_pytest=False)
    home = _home(tmp_path)
    proc = loopd(home, "new", "calc", "--repo", str(repo), timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    path = home / "loops" / "calc.toml"
    assert f"error: {path}: done_when[0]: `python3 -m pytest -q`: " in proc.stdout, proc.stdout
    assert f"module `pytest` not found by {bin_dir}/python3" in proc.stdout
    assert "the checks cannot run where loopd runs them" in proc.stdout
    assert "agent: qwen (loopd's default adapter" in proc.stdout
    assert path.is_file()


def test_nothing_is_overwritten_and_bad_input_writes_nothing(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "calc", {**CALC, "pyproject.toml": PYTEST_TABLE})
    config = command_agent("one", FIXER) + command_agent("two", FIXER)
    home = _home(tmp_path, config)
    loops = home / "loops"
    first = loopd(home, "new", "calc", "--repo", str(repo), "--no-probe")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "agent: one (the first agent profile of loopd.toml (others: two" in first.stdout
    (loops / "calc.toml").write_text((loops / "calc.toml").read_text() + "# mine\n")
    again = loopd(home, "new", "calc", "--repo", str(repo), "--no-probe")
    assert again.returncode == 2
    assert f"{loops / 'calc.toml'} exists already and is left as it is" in again.stderr
    assert "--force" in again.stderr
    assert (loops / "calc.toml").read_text().endswith("# mine\n")
    forced = loopd(
        home, "new", "calc", "--repo", str(repo), "--no-probe", "--force", "--agent", "two"
    )
    assert forced.returncode == 0, forced.stderr
    assert _loop(home, "calc")["agent"] == "two"
    assert "# mine" not in (loops / "calc.toml").read_text()

    bad_name = loopd(home, "new", "no/such", "--repo", str(repo), "--no-probe")
    assert bad_name.returncode == 2 and "cannot name a loop" in bad_name.stderr
    long_name = loopd(home, "new", "x" * 33, "--repo", str(repo), "--no-probe")
    assert long_name.returncode == 2 and "at most 32" in long_name.stderr
    agent = loopd(home, "new", "a1", "--repo", str(repo), "--no-probe", "--agent", "nobody")
    assert agent.returncode == 2 and "no agent profile 'nobody'" in agent.stderr

    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "notes.txt").write_text("hello\n")
    not_git = loopd(home, "new", "a2", "--repo", str(folder), "--no-probe")
    assert not_git.returncode == 2 and f"{folder} is not a git repository" in not_git.stderr
    assert "git -C" in not_git.stderr and "no loop file written" in not_git.stderr
    nothing = make_repo(
        tmp_path / "docs",
        {"README.md": "hi\n", "package.json": json.dumps({"scripts": {"test": NPM_DEFAULT}})},
    )
    blank = loopd(home, "new", "a3", "--repo", str(nothing), "--no-probe")
    assert blank.returncode == 2, blank.stdout
    assert f"nothing in {nothing} says how its tests run" in blank.stderr
    assert "--check 'COMMAND'" in blank.stderr
    assert sorted(p.name for p in loops.iterdir()) == ["calc.toml"]
    given = loopd(home, "new", "a3", "--repo", str(nothing), "--no-probe", "--check", "./check.sh")
    assert given.returncode == 0, given.stderr
    assert _loop(home, "a3")["done_when"] == ["./check.sh"]
    assert "the checks, all must exit 0: from --check done_when" in _said(home, "a3")


def test_init_offers_the_same_for_a_first_repository(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "My App", {**CALC, "pyproject.toml": PYTEST_TABLE})
    target = tmp_path / "home"
    plain = subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", "init", str(tmp_path / "other")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "new NAME --repo PATH" in plain.stdout
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "daemon.cli.main",
            "init",
            str(target),
            "--repo",
            str(repo),
            "--no-probe",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"wrote {target / 'loops' / 'My-App.toml'}" in proc.stdout
    text = _said(target, "My-App")
    assert f"written by `loopd init {target} --repo '{repo}'`" in text, text
    assert _loop(target, "My-App")["done_when"] == ["python3 -m pytest -q"]


def test_checks_that_pass_already_are_said_so(tmp_path: Path) -> None:
    """The probe of a non-Python loop: `make test` run in the sandbox on HEAD passes, so the
    default task has nothing to do, and the command says so."""
    repo = make_repo(tmp_path / "mk", {"Makefile": "test:\n\ttest -f ok.txt\n", "ok.txt": ""})
    home = _home(tmp_path)
    proc = loopd(home, "new", "mk", "--repo", str(repo), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "done_when: make test (from Makefile, its `test:` target)" in proc.stdout
    assert "mk: 1 of 1 check(s) pass on its base" in proc.stderr, proc.stderr
    assert "the checks pass on its base already" in proc.stdout, proc.stdout
    assert "protect: nothing (no test folder found" in proc.stdout
