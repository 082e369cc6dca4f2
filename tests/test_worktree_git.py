"""With `isolation = "worktree"` the person's git folder is read-only to the agent but for what
its own worktree writes: a hostile agent cannot stage into the person's index, plant merge
state, a `shallow` file, an alternates line or a submodule's config, and its own commits on
the run's branch still work. A `command` agent under the real bubblewrap, real git."""

from __future__ import annotations

import hashlib
import json
import sys
import tomllib
from pathlib import Path

from tests.helpers import git, loopd, make_home, make_repo
from tests.sandboxing import require_bwrap

FILES = {"calc.py": "def add(a, b):\n    return a - b\n", "check.py": "import calc\n"
         "assert calc.add(2, 3) == 5\n"}  # fmt: skip

ATTACK = """
import os, pathlib, subprocess
p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))
asked = ['git', 'rev-parse', '--path-format=absolute', '--git-common-dir']
common = pathlib.Path(subprocess.run(asked, capture_output=True, text=True).stdout.strip())
log = []
def attempt(name, fn):
    try:
        fn(); log.append(f'{name}: DONE')
    except OSError as exc:
        log.append(f'{name}: BLOCKED {exc.strerror}')
attempt('index', lambda: open(common / 'index', 'ab').write(b'backdoor'))
attempt('merge_head', lambda: (common / 'MERGE_HEAD').write_text('0' * 40 + '\\n'))
attempt('shallow', lambda: (common / 'shallow').write_text('0' * 40 + '\\n'))
attempt('alternates', lambda: (common / 'objects' / 'info' / 'alternates').write_text('/x\\n'))
attempt('modules', lambda: (common / 'modules' / 'x').mkdir(parents=True))
attempt('hooks', lambda: (common / 'hooks' / 'post-checkout').write_text('#!/bin/sh\\n'))
pathlib.Path('attack.log').write_text('\\n'.join(log) + '\\n')
env = dict(os.environ, GIT_AUTHOR_NAME='a', GIT_AUTHOR_EMAIL='a@b', GIT_COMMITTER_NAME='a',
           GIT_COMMITTER_EMAIL='a@b')
done = subprocess.run(['git', 'commit', '-qam', 'fix add'], env=env, capture_output=True,
                      text=True)
pathlib.Path('commit.log').write_text(f'{done.returncode} {done.stderr}')
"""


def _snapshot(common: Path) -> dict[str, str]:
    out = {}
    for name in ("index", "MERGE_HEAD", "shallow", "objects/info/alternates", "modules"):
        path = common / name
        out[name] = (
            hashlib.sha256(path.read_bytes()).hexdigest()
            if path.is_file()
            else ("folder" if path.is_dir() else "missing")
        )
    return out


def test_a_worktree_agent_cannot_write_the_persons_git_folder_but_can_commit(
    tmp_path: Path,
) -> None:
    require_bwrap()
    repo = make_repo(tmp_path / "repo", FILES)
    common = repo / ".git"
    before = _snapshot(common)
    agent = tmp_path / "agents" / "agent.py"
    agent.parent.mkdir()
    agent.write_text(ATTACK)
    argv = [sys.executable, str(agent)]
    config = f'[agents.hostile]\nadapter = "command"\ncommand = {json.dumps(argv)}\n'
    loop = (
        f'repo = "{repo}"\ntask = "Fix add."\nagent = "hostile"\ndone_when = ["python3 check.py"]\n'
        'isolation = "worktree"\ncritic = "off"\nmax_attempts = 1\nmax_nudges = 0\n'
    )
    home = make_home(tmp_path / "home", config, {"calc": loop})
    proc = loopd(home, "once", "calc", timeout=300)
    run_id = proc.stdout.split()[0]
    run = tomllib.loads((home / "state" / "runs" / run_id / "run.toml").read_text())
    attack = git(repo, "show", f"{run['branch']}:attack.log")
    for name in ("index", "merge_head", "shallow", "alternates", "modules", "hooks"):
        assert f"{name}: BLOCKED" in attack, attack
    assert _snapshot(common) == before
    assert not (common / "hooks" / "post-checkout").exists()
    # The agent's own commit on the run's branch went through.
    assert git(repo, "show", f"{run['branch']}:commit.log").startswith("0"), attack
    assert run["outcome"] == "succeeded", proc.stdout + proc.stderr


def test_a_base_that_names_no_commit_is_an_error_that_says_so(tmp_path: Path) -> None:
    """`rev-parse --verify -q` is silent about a missing name: the reason still says it."""
    from daemon.git.tree import TreeError, prepare_tree
    from daemon.git.userrepo import LedgerWriter
    from daemon.state.ledger import ledger_of

    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    writer = LedgerWriter(ledger_of(tmp_path / "state"), lambda: None, "r")  # type: ignore[arg-type]
    try:
        prepare_tree(
            repo, "l", "20261205T000000Z-l-0000", "clone", "nope/main", tmp_path / "w", writer
        )
    except TreeError as exc:
        said = str(exc)
    else:
        raise AssertionError("a base naming no commit made a tree")
    assert "base 'nope/main' is not a commit in" in said
    assert ": no commit has that name. Fix: set `base`" in said
