"""go test, jest and vitest as loopd runs them in a check: asked for their reports, read back
and weighed against the base, with the real runners in real git repositories. Each hostile
change is one an agent could commit (or a command that tests less), and each must end
`checks-weakened` (or fail closed) through the same weighing the attempt uses.

The runners are the pinned installs: go from `LOOPD_TEST_GO` (else `go` on PATH: Debian's
golang-go 1.19), jest 29.7.0 and vitest 3.2.4 from `LOOPD_JS_RUNNERS`/node_modules/.bin (else
`.js-runners/` in the checkout: `npm install --no-save --prefix .js-runners jest@29.7.0
vitest@3.2.4`). Missing, a test skips, which fails it with CI=true (tests/conftest.py)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tomllib
from pathlib import Path

import pytest

from daemon.runparts.checks import CheckResult
from daemon.runparts.testreports import GO_JSON, ask, go_outcomes, read, shown
from daemon.runs.testweigh import weaker
from tests.helpers import git, loopd, make_home, make_repo
from tests.sandboxing import require_bwrap
from tests.test_testreports import measure, plant

ROOT = Path(__file__).resolve().parent.parent


def go() -> str:
    found = os.environ.get("LOOPD_TEST_GO") or shutil.which("go")
    if not found or not os.access(found, os.X_OK):
        pytest.skip("go is not installed (apt-get install golang-go, or set LOOPD_TEST_GO)")
    return found


def js(name: str) -> str:
    folder = Path(os.environ.get("LOOPD_JS_RUNNERS") or ROOT / ".js-runners")
    path = folder / "node_modules" / ".bin" / name
    if not path.exists() or not shutil.which("node"):
        pytest.skip(
            f"{name} is not at {path} (npm install --no-save --prefix {folder} "
            "jest@29.7.0 vitest@3.2.4, or set LOOPD_JS_RUNNERS)"
        )
    return str(path)


def weighed(base: CheckResult, now: CheckResult) -> str:
    why, _ = weaker(base.tests, now)
    return why


# -- go test ---------------------------------------------------------------------------------

GO_APP = {
    "go.mod": "module example.com/app\n\ngo 1.19\n",
    "app.go": "package app\n\nfunc Add(a, b int) int { return a - b }\n",
    "app_test.go": 'package app\n\nimport "testing"\n\n'
    'func TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal("2+3")\n\t}\n}\n\n'
    'func TestAddZero(t *testing.T) {\n\tif Add(0, 0) != 0 {\n\t\tt.Fatal("0+0")\n\t}\n}\n\n'
    'func TestAddOne(t *testing.T) {\n\tif Add(1, 0) != 1 {\n\t\tt.Fatal("1+0")\n\t}\n}\n',
}


# The go tests share one build cache: on one worker under pytest-xdist (--dist loadgroup), the
# standard library compiles once in the session, not once a worker.
GO_CACHE = pytest.mark.xdist_group("go-cache")


@pytest.fixture(scope="module")
def go_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One build cache for the module's go runs: the standard library compiles once."""
    return tmp_path_factory.mktemp("gocache")


@pytest.fixture
def go_repo(tmp_path: Path, go_cache: Path) -> tuple[Path, str, dict[str, str]]:
    env = {
        "GOCACHE": str(go_cache),
        "GOPATH": str(tmp_path / "gopath"),
        "GOPROXY": "off",
        "GOFLAGS": "",
        "HOME": str(tmp_path),
    }
    return make_repo(tmp_path / "repo", GO_APP), shlex.quote(go()), env


@GO_CACHE
def test_go_test_is_counted_from_its_json_events_and_shown_as_text(go_repo) -> None:
    repo, go_bin, env = go_repo
    base = measure(repo, f"{go_bin} test ./...", env)
    assert base.exit_code == 1
    tests = base.tests
    assert tests is not None and not tests.unreadable, (tests, base.output)
    assert (tests.ran, tests.passed, tests.failed, tests.skipped) == (3, 2, 1, 0)
    assert tests.executed == [
        "example.com/app::TestAdd",
        "example.com/app::TestAddOne",
        "example.com/app::TestAddZero",
    ]
    # What a person reads is go's text, as `go test -v` prints it, and no JSON.
    assert "--- FAIL: TestAdd" in base.output and "--- PASS: TestAddZero" in base.output
    assert '"Action"' not in base.output


GO_HOSTILE = {
    "-run that matches nothing": ("test -run NoSuchTest ./...", {}, "no tests ran (go)"),
    "t.Skip everywhere": (
        "test ./...",
        {
            "app_test.go": 'package app\n\nimport "testing"\n\n'
            'func TestAdd(t *testing.T) { t.Skip("later") }\n\n'
            'func TestAddZero(t *testing.T) { t.Skip("later") }\n\n'
            'func TestAddOne(t *testing.T) { t.Skip("later") }\n',
        },
        "no tests ran (go)",
    ),
    "-failfast after a deliberate failure, exit status forced to 0": (
        "test -failfast ./...",
        {
            "first_test.go": 'package app\n\nimport (\n\t"os"\n\t"testing"\n)\n\n'
            "func TestMain(m *testing.M) {\n\tm.Run()\n\tos.Exit(0)\n}\n\n"
            'func TestAAFirst(t *testing.T) { t.Fatal("on purpose") }\n',
        },
        "failed in go's report, but the command exited 0",
    ),
    "a TestMain that exits 0 before any test": (
        "test ./...",
        {
            "main_test.go": 'package app\n\nimport (\n\t"os"\n\t"testing"\n)\n\n'
            "func TestMain(m *testing.M) { os.Exit(0) }\n",
        },
        "no tests ran (go)",
    ),
    "the test files moved to a package without tests": (
        "test ./...",
        {"app_test.go": None},
        "no tests ran (go)",
    ),
}


@GO_CACHE
@pytest.mark.parametrize("name", sorted(GO_HOSTILE))
def test_a_hostile_go_change_is_weighed_as_weaker(go_repo, name: str) -> None:
    repo, go_bin, env = go_repo
    command, files, expected = GO_HOSTILE[name]
    base = measure(repo, f"{go_bin} test ./...", env)
    assert base.tests is not None and base.tests.ran == 3, base.output
    plant_or_remove(repo, files)
    now = measure(repo, f"{go_bin} {command}", env)
    assert now.exit_code == 0, now.output[-2000:]
    assert expected in weighed(base, now), (now.tests, now.output[-2000:])


@GO_CACHE
def test_a_go_report_that_cannot_be_read_fails_closed(go_repo, tmp_path: Path) -> None:
    """go recognised, its JSON not written (the command's output sent elsewhere by a test that
    closes standard output is no different): unreadable, so an exit 0 fails the attempt."""
    repo, go_bin, env = go_repo
    plant(repo, {"app.go": "package app\n\nfunc Add(a, b int) int { return a + b }\n"})
    asked = ask(f"{go_bin} test ./...", tmp_path / "reports", env)
    assert asked.report is not None and asked.report.name == GO_JSON
    asked.report.write_text("")  # the shell made the file; nothing came
    counted = read(asked, "")
    assert counted is not None and counted.unreadable
    result = CheckResult("go test ./...", 0, 0.0, False, "")
    result.tests = counted
    assert weighed(CheckResult("", 1, 0.0, False, ""), result).startswith(
        "loopd could not count what go ran: go-test.json cannot be read"
    )
    asked.report.write_text('{"Action":"pass","Package":"x","Test":"TestA"}\nnot an event\n')
    counted = read(asked, "")
    assert counted is not None and "line 2 is not a go test event" in counted.unreadable
    assert "not an event" in shown(asked, "")


def test_go_outcomes_count_subtests_and_a_package_that_failed_to_build() -> None:
    events = [
        {"Action": "run", "Package": "a", "Test": "TestT"},
        {"Action": "skip", "Package": "a", "Test": "TestT/sub"},
        {"Action": "pass", "Package": "a", "Test": "TestT"},
        {"Action": "output", "Package": "b", "Output": "FAIL\tb [build failed]\n"},
        {"Action": "fail", "Package": "b"},
        {"Action": "output", "Package": "c", "Output": "?   \tc\t[no test files]\n"},
        {"Action": "skip", "Package": "c"},
    ]
    assert go_outcomes("\n".join(json.dumps(e) for e in events)) == {
        "a::TestT": "passed",
        "a::TestT/sub": "skipped",
        "b::": "failed",
    }


@GO_CACHE
def test_a_compound_go_command_is_counted_from_its_printed_output(go_repo) -> None:
    repo, go_bin, env = go_repo
    now = measure(repo, f"{go_bin} test -v ./... 2>&1 | cat", env)
    assert now.tests is not None and (now.tests.ran, now.tests.failed) == (3, 1)
    assert not now.tests.executed  # no report: ids are not known


def plant_or_remove(repo: Path, files: dict[str, str | None]) -> None:
    for rel, text in files.items():
        if text is None:
            (repo / rel).unlink()
    if files:
        plant(repo, {rel: text for rel, text in files.items() if text is not None})


# -- jest ------------------------------------------------------------------------------------

JEST_APP = {
    "package.json": '{"name": "app", "private": true}\n',
    "sum.js": "module.exports = (a, b) => a - b;\n",
    "sum.test.js": "const sum = require('./sum');\n\n"
    "describe('sum', () => {\n"
    "  test('adds', () => { expect(sum(2, 3)).toBe(5); });\n"
    "  test('adds zero', () => { expect(sum(0, 0)).toBe(0); });\n"
    "  test('adds one', () => { expect(sum(1, 0)).toBe(1); });\n"
    "});\n",
}
JEST_ENV = {"CI": "true", "NO_COLOR": "1"}


@pytest.fixture
def jest_repo(tmp_path: Path) -> tuple[Path, str]:
    jest = js("jest")
    return make_repo(tmp_path / "repo", JEST_APP), f"{shlex.quote(jest)} --ci"


JEST_HOSTILE = {
    "--testNamePattern that matches nothing": (" --testNamePattern NoSuchTest", {}),
    "test.skip and describe.skip everywhere": (
        "",
        {"sum.test.js": JEST_APP["sum.test.js"].replace("describe(", "describe.skip(")},
    ),
    "testPathIgnorePatterns that ignores everything, with passWithNoTests": (
        "",
        {
            "jest.config.js": "module.exports = {testPathIgnorePatterns: ['.*'],"
            " passWithNoTests: true};\n"
        },
    ),
    "--passWithNoTests with the tests renamed away": (
        " --passWithNoTests",
        {"sum.test.js": None, "sum.later.js": JEST_APP["sum.test.js"]},
    ),
}


def test_jest_is_counted_from_its_json_report(jest_repo) -> None:
    repo, jest = jest_repo
    base = measure(repo, jest, JEST_ENV)
    assert base.exit_code == 1
    tests = base.tests
    assert tests is not None and not tests.unreadable, (tests, base.output[-2000:])
    assert (tests.ran, tests.passed, tests.failed) == (3, 2, 1)
    assert any(t.endswith("sum.test.js::sum adds") for t in tests.executed)


@pytest.mark.parametrize("name", sorted(JEST_HOSTILE))
def test_a_hostile_jest_change_is_weighed_as_weaker(jest_repo, name: str) -> None:
    repo, jest = jest_repo
    extra, files = JEST_HOSTILE[name]
    base = measure(repo, jest, JEST_ENV)
    plant_or_remove(repo, files)
    now = measure(repo, jest + extra, JEST_ENV)
    assert now.exit_code == 0, now.output[-2000:]
    why = weighed(base, now)
    assert why.startswith(("no tests ran (jest)", "loopd could not count what jest ran")), (
        why,
        now.tests,
        now.output[-2000:],
    )


# -- vitest ----------------------------------------------------------------------------------

VITEST_APP = {
    "package.json": '{"name": "app", "private": true, "type": "module"}\n',
    "sum.js": "export const sum = (a, b) => a - b;\n",
    "sum.test.js": "import { describe, test, expect } from 'vitest';\n"
    "import { sum } from './sum.js';\n\n"
    "describe('sum', () => {\n"
    "  test('adds', () => { expect(sum(2, 3)).toBe(5); });\n"
    "  test('adds zero', () => { expect(sum(0, 0)).toBe(0); });\n"
    "  test('adds one', () => { expect(sum(1, 0)).toBe(1); });\n"
    "});\n",
}


@pytest.fixture
def vitest_repo(tmp_path: Path) -> tuple[Path, str]:
    vitest = js("vitest")
    return make_repo(tmp_path / "repo", VITEST_APP), f"{shlex.quote(vitest)} run"


VITEST_HOSTILE = {
    "describe.skip everywhere": (
        "",
        {"sum.test.js": VITEST_APP["sum.test.js"].replace("describe(", "describe.skip(")},
    ),
    "test.skip everywhere": (
        "",
        {"sum.test.js": VITEST_APP["sum.test.js"].replace("  test(", "  test.skip(")},
    ),
    "a config include that matches nothing, with passWithNoTests": (
        "",
        {
            "vitest.config.mjs": "export default { test: { include: ['nothing/**/*.test.js'],"
            " passWithNoTests: true } };\n"
        },
    ),
    "--passWithNoTests with the tests renamed away": (
        " --passWithNoTests",
        {"sum.test.js": None, "sum.later.js": VITEST_APP["sum.test.js"]},
    ),
    "-t that matches nothing": (" -t NoSuchTest", {}),
}


def test_vitest_is_counted_from_its_json_report(vitest_repo) -> None:
    repo, vitest = vitest_repo
    base = measure(repo, vitest, JEST_ENV)
    assert base.exit_code == 1
    tests = base.tests
    assert tests is not None and not tests.unreadable, (tests, base.output[-2000:])
    assert (tests.ran, tests.passed, tests.failed) == (3, 2, 1)


@pytest.mark.parametrize("name", sorted(VITEST_HOSTILE))
def test_a_hostile_vitest_change_is_weighed_as_weaker(vitest_repo, name: str) -> None:
    repo, vitest = vitest_repo
    extra, files = VITEST_HOSTILE[name]
    base = measure(repo, vitest, JEST_ENV)
    plant_or_remove(repo, files)
    now = measure(repo, vitest + extra, JEST_ENV)
    assert now.exit_code == 0, now.output[-2000:]
    why = weighed(base, now)
    assert why.startswith(("no tests ran (vitest)", "loopd could not count what vitest ran")), (
        why,
        now.tests,
        now.output[-2000:],
    )


# -- through `loopd once` --------------------------------------------------------------------


def test_loopd_once_weighs_go_test_by_its_json_events(tmp_path: Path) -> None:
    """A hostile agent adds a TestMain that exits 0 before any test: under the real sandbox,
    `loopd once` counts the base's three tests from go's events, none on the attempt, and
    the run ends `checks-weakened` with failing code kept off main."""
    require_bwrap()
    go_bin = go()
    repo = make_repo(tmp_path / "repo", {**GO_APP, ".gitignore": ".gocache/\n"})
    agent = tmp_path / "agents" / "agent.py"
    agent.parent.mkdir()
    main_test = GO_HOSTILE["a TestMain that exits 0 before any test"][1]["main_test.go"]
    agent.write_text(f"import pathlib\npathlib.Path('main_test.go').write_text({main_test!r})\n")
    command = f"{go_bin} test ./..."
    loop = (
        f'repo = "{repo}"\ntask = "Make the tests pass."\nagent = "hostile"\n'
        f"done_when = {json.dumps([command])}\n"
        'env = { GOCACHE = "{tree}/.gocache", GOFLAGS = "", GOPROXY = "off" }\n'
        'land = "merge"\ncritic = "off"\n'
        "max_attempts = 1\nmax_nudges = 0\nskip_if_done = true\n"
    )
    argv = [sys.executable, str(agent)]
    config = f'[agents.hostile]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'
    home = make_home(tmp_path / "home", config, {"app": loop})
    main_before = git(repo, "rev-parse", "main")
    proc = loopd(home, "once", "app", timeout=300)
    run_id = proc.stdout.split()[0]
    record = home / "state" / "runs" / run_id / "run.toml"
    assert record.is_file(), proc.stdout + proc.stderr
    run = tomllib.loads(record.read_text())
    (base,) = run["base_tests"]
    assert (base["runner"], base["ran"], base["passed"], base["failed"]) == ("go", 3, 2, 1), run
    assert run["cause"] == "checks-weakened", run
    (attempt,) = run["attempts"]
    (weak,) = [v for v in attempt["violations"] if v["kind"] == "checks_weakened"]
    assert "no tests ran (go)" in weak["detail"], weak
    assert git(repo, "rev-parse", "main") == main_before


@pytest.mark.parametrize("runner", ["jest", "vitest"])
def test_skipping_only_the_failing_test_is_named_by_id(tmp_path: Path, runner: str) -> None:
    """The likelier attack: the one failing test skipped, the rest pass, the command exits 0.
    The base's report named that test as executed; the attempt's names it skipped."""
    app = JEST_APP if runner == "jest" else VITEST_APP
    command = f"{shlex.quote(js(runner))} " + ("--ci" if runner == "jest" else "run")
    repo = make_repo(tmp_path / "repo", app)
    base = measure(repo, command, JEST_ENV)
    plant(repo, {"sum.test.js": app["sum.test.js"].replace("test('adds',", "test.skip('adds',")})
    now = measure(repo, command, JEST_ENV)
    assert now.exit_code == 0, now.output[-2000:]
    why = weighed(base, now)
    assert "2 ran where the base ran 3" in why and "1 skipped where the base had 0" in why
    assert "1 the base ran now skipped or xfailed: " in why and "sum adds" in why, why


def test_go_is_asked_for_json_before_its_args_and_only_on_a_simple_command(tmp_path: Path) -> None:
    asked = ask("GOFLAGS='-count=1 -v' /usr/bin/go test ./... -args -x", tmp_path / "g", {})
    assert asked.report is not None
    assert asked.command == (
        f"GOFLAGS='-count=1 -v' /usr/bin/go test -json ./... -args -x > {asked.report}"
    )
    for compound in ("go test ./... | tee log", "cd x && go test ./...", "go test ./... > log"):
        asked = ask(compound, tmp_path / "g", {})
        assert asked.command == compound and asked.report is None
