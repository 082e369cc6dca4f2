"""Runs in a private clone (the default isolation): made, resumed, retried and removed.

Real git repositories, real agents (`command`), the executor in process or `loopd once`.
(Named to run after test_hooks.py: an in-process run makes pytest a child subreaper, and
the hooks' background processes of earlier tests would then stay its zombies.)
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path

from daemon.git.safe import Git
from daemon.git.tree import prepare_tree, record_tree, reopen_tree
from daemon.runs.executor import RunExecutor
from daemon.runs.recovery import recover_run
from daemon.state.ledger import ledger_of
from daemon.state.records import AttemptRecord
from tests.helpers import git, loopd, make_home, make_repo, wait_for
from tests.model_server import ScriptedModelServer, call_name
from tests.sandboxing import require_bwrap
from tests.test_run_lifecycle import JOIN, in_thread, make_case, writer

# Fixes add and leaves a note for the next attempt; the note's presence shows where it runs.
FIXER = (
    "import pathlib\n"
    "p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
    "pathlib.Path('notes.txt').write_text('fixed\\n')\n"
)


def test_a_clone_run_makes_its_branch_in_the_users_repository_and_removes_its_clone(
    tmp_path: Path,
) -> None:
    case = make_case(tmp_path, FIXER)
    main_before = git(case.repo, "rev-parse", "main")
    run = case.new_run()
    ended = RunExecutor(case.services, case.loop, run).execute()

    assert ended.outcome == "succeeded", ended.reason
    assert ended.isolation == "clone"
    # The clone and loopd's git directory are gone; the branch stays for the person.
    assert not Path(ended.worktree).exists() and not Path(ended.own_git_dir).exists()
    assert git(case.repo, "show", f"{ended.branch}:calc.py").endswith("a + b")
    assert git(case.repo, "show", f"{ended.branch}:notes.txt") == "fixed"
    assert git(case.repo, "rev-parse", "main") == main_before
    assert git(case.repo, "worktree", "list").count("\n") == 0  # no worktree was made
    (head,) = ended.attempts
    log = git(case.repo, "log", "-1", "--format=%an <%ae>", ended.branch)
    assert log == "loopd <loopd@localhost>" and head.head_commit == git(
        case.repo, "rev-parse", ended.branch
    )
    # Every move loopd made of the branch is in the ledger.
    entries = ledger_of(case.store.root).entries(str((case.repo / ".git").resolve()))
    assert [e.ref for e in entries] == [f"refs/heads/{ended.branch}"] * len(entries)
    assert entries[-1].new == head.head_commit


def test_a_clone_is_private_one_branch_no_tags_and_objects_shared(tmp_path: Path) -> None:
    case = make_case(tmp_path)
    git(case.repo, "tag", "v1")
    for n in range(5):
        git(case.repo, "branch", f"loopd/other/run-{n}")
    run = case.new_run()
    limits = case.services.config.limits
    tree = prepare_tree(
        case.repo, "calc", run.id, "clone", "HEAD", limits.worktrees_path, writer(case, run)
    )
    clone_refs = git(tree.path, "for-each-ref", "--format=%(refname)").splitlines()
    assert set(clone_refs) == {
        f"refs/heads/{tree.branch}",
        f"refs/remotes/origin/{tree.branch}",
    }
    assert git(tree.path, "symbolic-ref", "HEAD") == f"refs/heads/{tree.branch}"
    assert git(tree.path, "status", "--porcelain") == ""  # files and index as the commit
    alternates = (tree.path / ".git" / "objects" / "info" / "alternates").read_text()
    assert alternates.strip() == str((case.repo / ".git" / "objects").resolve())
    assert tree.own_dir is not None and tree.own_dir.parent == tree.path.parent
    assert tree.own_dir.name == f"{run.id}.git" and not (tree.path / tree.own_dir.name).exists()
    assert git(case.repo, "rev-parse", tree.branch) == tree.base_commit


def test_a_run_resumed_after_a_restart_finds_its_clone_again_even_when_it_was_lost(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    def reply(body: dict) -> dict:
        if call_name(body) == "critic_verdict":
            return {
                "json": {"score": 9, "verdict": "Done.", "unsupported_claims": [], "feedback": ""}
            }
        return {"status": 503, "message": "not now"}

    model_server.script(reply)
    case = make_case(tmp_path, FIXER, server=model_server)
    model_server.down = "refuse"
    run = case.new_run()
    first = RunExecutor(case.services, case.loop, run)
    thread = in_thread(first)
    wait_for(lambda: [e for e in case.events(run.id) if e["type"] == "verifier_unavailable"])
    first.interrupt(0)
    thread.join(JOIN)
    stopped = case.store.load_run(run.id)
    assert stopped.phase == "judging" and stopped.isolation == "clone"
    # The machine lost the clone and loopd's git directory (a cleaned cache, say).
    shutil.rmtree(stopped.worktree)
    shutil.rmtree(stopped.own_git_dir)

    model_server.down = None
    resumed = RunExecutor(case.services, case.loop, case.store.load_run(run.id)).execute()
    assert resumed.outcome == "succeeded", resumed.reason
    assert git(case.repo, "show", f"{resumed.branch}:calc.py").endswith("a + b")
    assert not Path(resumed.worktree).exists()


def test_reopen_makes_a_lost_clone_at_loopds_commit(tmp_path: Path) -> None:
    case = make_case(tmp_path)
    run = case.new_run()
    limits = case.services.config.limits
    tree = prepare_tree(
        case.repo, "calc", run.id, "clone", "HEAD", limits.worktrees_path, writer(case, run)
    )
    record_tree(run, tree)
    (tree.path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    own = tree.own
    staged = own.stage_all()
    new = own.commit_tree(staged, [own.tip()], "loopd: work")
    own.set_tip(new, tree.base_commit)  # committed, not yet fetched into the user's repo
    shutil.rmtree(tree.path)
    again = reopen_tree(run, limits.worktrees_path)
    assert (again.path / "calc.py").read_text().endswith("a + b\n")
    assert git(again.path, "rev-parse", "HEAD") == tree.base_commit  # the agent's view lags
    assert (
        Git(again.path, git_dir=own.path, work_tree=again.path).out("status", "--porcelain") == ""
    )


def test_an_interrupted_clone_run_is_retried_from_its_branch(tmp_path: Path) -> None:
    case = make_case(tmp_path)
    run = case.new_run()
    limits = case.services.config.limits
    tree = prepare_tree(
        case.repo, "calc", run.id, "clone", "HEAD", limits.worktrees_path, writer(case, run)
    )
    record_tree(run, tree)
    run.attempts = [AttemptRecord(n=1, started=datetime.now(UTC), base_commit=tree.base_commit)]
    run.phase = "running"
    case.store.save_run(run)
    # The dead loopd's agent had done half the work in the clone.
    (tree.path / "half.txt").write_text("half done\n")

    recovery = recover_run(case.services, {"calc": case.loop}, run.id, datetime.now(UTC))
    assert recovery.action == "retry" and recovery.retry_trigger is not None
    ended = case.store.load_run(run.id)
    assert git(case.repo, "show", f"{ended.branch}:half.txt") == "half done"
    assert not tree.path.exists()

    retry = case.new_run("retry", retry_of=run.id)
    retried = RunExecutor(case.services, case.loop, retry).execute()
    assert retried.base_commit == git(case.repo, "rev-parse", ended.branch)
    assert git(case.repo, "show", f"{retried.branch}:half.txt") == "half done"


def test_loopd_once_runs_in_a_clone_by_default(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "repo",
        # The check fails on the base: a run whose checks already pass is skipped as done.
        {
            "calc.py": "def add(a, b):\n    return a - b\n",
            "check.py": "from calc import add\nassert add(2, 3) == 5\n",
        },
    )
    argv = [sys.executable, "-c", FIXER + "import os\nprint(os.getcwd())\n"]
    home = make_home(
        tmp_path / "home",
        f'[agents.a]\nadapter = "command"\ncommand = {json.dumps(argv)}\n',
        {
            "calc": f'repo = "{repo}"\ntask = "fix"\nagent = "a"\ncritic = "off"\n'
            'done_when = ["python3 check.py"]\nmax_attempts = 1\n'
        },
    )
    proc = loopd(home, "once", "calc", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.split()[0]
    assert f"branch loopd/calc/{run_id}" in proc.stdout
    assert git(repo, "show", f"loopd/calc/{run_id}:calc.py").endswith("a + b")
    assert not (tmp_path / "worktrees" / "calc" / run_id).exists()
    assert os.listdir(tmp_path / "worktrees" / "calc") == []


def test_loopds_own_exclude_list_keeps_paths_out_and_the_trees_exclude_does_not(
    tmp_path: Path,
) -> None:
    case = make_case(tmp_path)
    run = case.new_run()
    limits = case.services.config.limits
    tree = prepare_tree(
        case.repo, "calc", run.id, "clone", "HEAD", limits.worktrees_path, writer(case, run)
    )
    tree.own.exclude([".venv/"])
    (tree.path / ".venv").mkdir()
    (tree.path / ".venv" / "python").write_text("made by setup\n")
    (tree.path / "helper.py").write_text("x = 1\n")
    (tree.path / ".git" / "info").mkdir(exist_ok=True)
    (tree.path / ".git" / "info" / "exclude").write_text("helper.py\n")
    staged = tree.own.stage_all()
    listed = Git(tree.path, git_dir=tree.own.path).out("ls-tree", "-r", "--name-only", staged)
    assert "helper.py" in listed.splitlines()
    assert not any(p.startswith(".venv/") for p in listed.splitlines())


def test_a_sha256_repository_runs_in_a_clone(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main", "--object-format=sha256")
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "check.py").write_text("from calc import add\nassert add(2, 3) == 5\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    argv = [sys.executable, "-c", FIXER]
    home = make_home(
        tmp_path / "home",
        f'[agents.a]\nadapter = "command"\ncommand = {json.dumps(argv)}\n',
        {
            "calc": f'repo = "{repo}"\ntask = "fix"\nagent = "a"\ncritic = "off"\n'
            'done_when = ["python3 check.py"]\nmax_attempts = 1\n'
        },
    )
    proc = loopd(home, "once", "calc", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    branch = f"loopd/calc/{proc.stdout.split()[0]}"
    assert len(git(repo, "rev-parse", branch)) == 64
    assert git(repo, "show", f"{branch}:calc.py").endswith("a + b")


def test_the_repository_guards_are_off_only_for_a_sandboxed_clone(tmp_path: Path) -> None:
    require_bwrap()
    seen = {}
    for isolation, mode in (("clone", "bwrap"), ("clone", "off"), ("worktree", "bwrap")):
        case = make_case(tmp_path / f"{isolation}-{mode}", FIXER, isolation=isolation)
        case.services.config.sandbox.mode = mode  # as `[sandbox] mode` in loopd.toml
        case.services.config.sandbox.unconfined_as_root = mode == "off"
        run = case.new_run()
        ended = RunExecutor(case.services, case.loop, run).execute()
        assert ended.outcome == "succeeded", ended.reason
        assert ended.sandbox == mode  # the sandbox in force, recorded by the run
        guard_file = case.store.run_dir(run.id) / "repo-guard.json"
        seen[(isolation, mode)] = (guard_file.exists(), bool(ended.refs_before))
    # With the user's repository read-only to a sandboxed agent, nothing to watch there.
    assert seen == {
        ("clone", "bwrap"): (False, False),
        ("clone", "off"): (True, True),
        ("worktree", "bwrap"): (True, True),
    }
