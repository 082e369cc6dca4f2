"""The README's first command on a fresh clone: `loopd --home . run` shows loopd doing its
job on the embedded example, then says what happened and where to read it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from daemon.example import AGENT_SOURCE, PACKAGE_DIR, REPO_FILES
from daemon.home import EXAMPLE_CONFIG, EXAMPLE_LOOP
from tests.helpers import (
    ROOT,
    daemon_log,
    git,
    loopd,
    runs,
    start_daemon,
    stop_daemon,
    wait_for,
)


def _fresh_clone(tmp_path: Path, with_package: bool = False) -> tuple[Path, dict[str, str]]:
    """The checkout's home as a fresh clone has it, and a HOME of the test's own; with the
    package too when loopd is to run from it (the package then lives inside the home)."""
    home = tmp_path / "clone"
    home.mkdir()
    if with_package:
        shutil.copytree(
            PACKAGE_DIR.parent, home / "daemon", ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "loopd.toml", home / "loopd.toml")
    shutil.copytree(ROOT / "loops", home / "loops")
    shutil.copytree(ROOT / "rules", home / "rules")
    user = tmp_path / "user"
    user.mkdir()
    return home, {"HOME": str(user)}


def test_the_shipped_home_is_what_init_writes() -> None:
    assert (ROOT / "loopd.toml").read_text() == EXAMPLE_CONFIG
    assert (ROOT / "loops" / "example.toml").read_text() == EXAMPLE_LOOP
    loop = tomllib.loads(EXAMPLE_LOOP)
    assert loop["enabled"] is True and loop["repo"] == "~/.cache/loopd/example"


def test_the_first_run_shows_a_whole_run_and_says_where_to_read_it(
    tmp_path: Path, daemons: list
) -> None:
    home, env = _fresh_clone(tmp_path, with_package=True)
    user = Path(env["HOME"])
    daemon = _run_in_checkout(home, env)
    daemons.append(daemon)
    wait_for(lambda: "Your own loop:" in daemon_log(home), timeout=60, what="the example's summary")
    (run,) = runs(home)
    assert run["loop"] == "example" and run["trigger"]["kind"] == "manual"
    assert run["outcome"] == "succeeded", run
    (attempt,) = run["attempts"]
    assert attempt["checks_passed"] is True and attempt["nudges"] == 1
    assert [s["kind"] for s in attempt["stalls"]] == ["stopped_early"]
    log = daemon_log(home)
    lines = log[log.index("loopd: the example ran") :].splitlines()[:5]
    assert lines[0] == f"loopd: the example ran ({run['id']}): succeeded, {run['reason']}."
    # Run from the checkout itself, its commands need no --home.
    assert f"`loopd show {run['id']}`" in lines[2]
    assert f"`loopd logs {run['id']}`" in lines[2]
    assert f"state/runs/{run['id']}/" in lines[3] and "state/progress/example.md" in lines[3]
    assert "state/README.md" in lines[3] and "state/reports/report-" in lines[3]
    assert "`loopd new NAME --repo PATH` writes loops/NAME.toml" in lines[4]
    assert "copy loops/example.toml to loops/NAME.toml" in lines[4]
    assert "loads the files within seconds" in lines[4] and "SIGHUP" not in lines[4]
    after = log[log.index("loopd: the example ran") :].splitlines()[1:]
    said = next((i for i, line in enumerate(after) if not line.startswith("  ")), len(after))
    assert said == 4  # a few lines: the head and four indented ones
    # What it says is there: the run, the progress note, the report, state's guide.
    state = home / "state"
    report = lines[3].split("state/reports/", 1)[1].split(";")[0].split(",")[0]
    assert (state / "reports" / report).is_file()
    assert "## Open escalations" in (state / "progress" / "example.md").read_text()
    assert (state / "README.md").is_file()
    # The example's repository is outside the home, under the user's cache, untouched.
    repo = user / ".cache" / "loopd" / "example"
    assert Path(run["repo"]) == repo and not repo.is_relative_to(home)
    assert git(repo, "status", "--porcelain") == ""
    assert "return a - b" in (repo / "calc.py").read_text()
    assert "return a + b" in git(repo, "show", f"{run['branch']}:calc.py")
    assert stop_daemon(daemon) == 0
    # A second start: state/runs/ is not empty, so the example does not run again.
    before = daemon_log(home)
    daemon = start_daemon(home, env=env)
    daemons.append(daemon)
    assert stop_daemon(daemon) == 0
    assert len(runs(home)) == 1
    assert "the example ran" not in daemon_log(home)[len(before) :]


def test_the_checkout_checks_clean_before_the_example_exists(tmp_path: Path) -> None:
    home, env = _fresh_clone(tmp_path)
    proc = loopd(home, "check", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 valid loop(s): example; 0 error(s), 0 warning(s)" in proc.stdout
    assert not (Path(env["HOME"]) / ".cache").exists()  # `check` prepares nothing
    ran = loopd(home, "once", "example", env=env)  # `once` prepares it, as `run` does
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_the_example_agent_lives_in_the_package_and_writes_only_its_tree(tmp_path: Path) -> None:
    assert AGENT_SOURCE.parent == PACKAGE_DIR and AGENT_SOURCE.is_relative_to(ROOT / "daemon")
    tree = tmp_path / "tree"
    shutil.copytree(REPO_FILES, tree)
    (tree / ".gitignore").write_text("")
    git(tree, "init", "-q")
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", "x")
    user = tmp_path / "user"
    user.mkdir()
    before = sorted(p.name for p in PACKAGE_DIR.rglob("*"))
    env = {"PATH": os.environ["PATH"], "HOME": str(user)}
    for _ in range(2):
        subprocess.run(
            [sys.executable, str(AGENT_SOURCE)],
            input="# Task\n\nMake the failing tests pass.\n",
            text=True,
            cwd=tree,
            env=env,
            check=True,
            timeout=60,
        )
    assert git(tree, "status", "--porcelain") == "M calc.py"
    assert list(user.iterdir()) == []
    assert sorted(p.name for p in PACKAGE_DIR.rglob("*")) == before
    done = subprocess.run(
        [sys.executable, "-m", "unittest", "-q"], cwd=tree, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def _run_in_checkout(home: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """`loopd --home . run` in the clone, importing loopd from the clone itself, as the
    README's first command does: the example agent's script then lies inside the home,
    which the sandbox hides from agents."""
    import time

    full_env = {**os.environ, **env}
    full_env.pop("LOOPD_HOME", None)
    full_env.pop("PYTHONPATH", None)
    with open(home / "daemon.log", "a") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "daemon.cli.main", "--home", ".", "run"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
            cwd=home,
            text=True,
        )
    deadline = time.monotonic() + 30
    while "running for" not in daemon_log(home) and time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"loopd run exited {proc.returncode}: {daemon_log(home)}")
        time.sleep(0.05)
    return proc
