"""After it lands: a landed run followed on its target (docs/aftermath.md).

Real git repositories: a run lands by `loopd once` (land = "merge", a command agent), then
"a person" commits on the target as themselves: an edit, a `git revert`, a squash of the run's
change under their own name, a rewrite without it. `loopd aftermath`, `show` and `runs` as
real subprocesses; the windows with fixed datetimes through the daemon's Follower.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from daemon.aftermath.sweep import Held, sweep
from daemon.home import Home
from daemon.people.aftermath_view import aftermath_json
from daemon.people.report import build_report, render_markdown
from daemon.plain import aftermath as plain
from daemon.rules.library import RuleLibrary
from daemon.rules.rulefile import Rule
from daemon.runs.executor import RunExecutor
from daemon.service.aftermath import Follower
from daemon.state.aftermath import AFTERMATH_FILE, load_aftermath
from daemon.state.records import RunRecord
from daemon.state.store import StateStore
from daemon.stats import wilson
from tests.helpers import git, loopd, make_repo, start_daemon, stop_daemon, wait_for
from tests.test_landing import land_case
from tests.test_learning_e2e import AGREES, default_reply
from tests.test_run_lifecycle import BUGGY, JOIN
from tests.test_service import Clocks, context

# Fixes add() and adds a function: five lines of its own land.
AGENT = (
    "import pathlib\n"
    "pathlib.Path('calc.py').write_text("
    "'def add(a, b):\\n    total = a + b\\n    return total\\n\\n\\n"
    "def twice(a):\\n    doubled = add(a, a)\\n    return doubled\\n')\n"
)


def person(repo: Path, *args: str, when: datetime | None = None) -> str:
    """git as a person (Ann), at `when` when given."""
    env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1")
    env.update(
        GIT_AUTHOR_NAME="Ann",
        GIT_AUTHOR_EMAIL="ann@example.com",
        GIT_COMMITTER_NAME="Ann",
        GIT_COMMITTER_EMAIL="ann@example.com",
    )
    if when is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = when.isoformat()
    proc = subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def landing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home whose loop `calc` landed one run on main by merge, through `loopd once`: made
    once for the module (per worker), in live/, and kept as it was in pristine/."""
    base = tmp_path_factory.mktemp("landed")
    case = land_case(base / "live", agent=AGENT, land="merge")
    proc = loopd(case.home.root, "once", "calc", timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = next(case.home.state().iter_runs("calc"))
    assert run.landed and run.landed_as == git(case.repo, "rev-parse", "main"), run
    shutil.copytree(base / "live", base / "pristine", symlinks=True)
    return base


def landed(landing: Path) -> tuple[Home, Path, RunRecord]:
    """The landed run's home and repository as `loopd once` left them: pristine/ copied back
    over live/, so each path the state names (the repository, the worktrees) holds again."""
    live = landing / "live"
    shutil.rmtree(live)
    shutil.copytree(landing / "pristine", live, symlinks=True)
    home = Home(live / "home")
    return home, live / "repo", next(home.state().iter_runs("calc"))


def aftermath_of(home: Home, *which: str) -> dict[str, Any]:
    proc = loopd(home.root, "aftermath", *which, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = json.loads(proc.stdout)["aftermath"]
    assert len(records) == 1, records
    return records[0]


def edit(repo: Path, old: str, new: str, message: str, when: datetime | None = None) -> str:
    path = repo / "calc.py"
    path.write_text(path.read_text().replace(old, new))
    person(repo, "commit", "-qam", message, when=when)
    return git(repo, "rev-parse", "HEAD")


def test_a_landed_run_is_kept_then_edited_by_a_person_and_show_and_runs_say_so(
    landing: Path,
) -> None:
    home, repo, run = landed(landing)
    first = aftermath_of(home, run.id)
    assert first["state"] == "kept" and first["commits"] == []
    assert (
        first["lines_landed"] == first["lines_kept"] == 5
    )  # its new lines; blank ones do not count
    # A person's commit in other files is not read for the run (only its files are).
    (repo / "notes.txt").write_text("unrelated\n")
    person(repo, "add", "notes.txt")
    person(repo, "commit", "-qm", "notes, elsewhere")
    assert aftermath_of(home, "calc")["state"] == "kept"

    sha = edit(repo, "    return doubled", "    return int(doubled)", "twice: an int, always")
    after = aftermath_of(home)
    assert after["state"] == "edited"
    assert (after["lines_landed"], after["lines_kept"]) == (5, 4)
    assert after["commits"] == [
        {
            "commit": sha,
            "author": "Ann",
            "date": after["commits"][0]["date"],
            "message": "twice: an int, always",
            "revert": False,
            "added": 1,
            "removed": 1,
        }
    ]
    shown = json.loads(loopd(home.root, "show", run.id, "--json").stdout)["aftermath"]
    assert shown["state"] == "edited" and shown["commits"][0]["author"] == "Ann"
    assert shown["checked_at"] and shown["window"] == ""  # the first day is not over
    text = loopd(home.root, "show", run.id).stdout
    assert "aftermath: edited: 4 of 5 lines kept (20% changed) by Ann" in text
    assert "twice: an int, always" in text
    listed = loopd(home.root, "runs", "calc").stdout
    assert "edited" in listed
    runs_json = json.loads(loopd(home.root, "runs", "--json").stdout)
    assert [r["aftermath"]["state"] for r in runs_json if r["run"] == run.id] == ["edited"]
    kinds = [json.loads(line)["type"] for line in (home.state_dir / "events.jsonl").open()]
    assert kinds.count("aftermath_started") == 1 and kinds.count("aftermath_changed") == 1


def test_a_git_revert_of_the_landed_commit_is_reverted_with_the_persons_message(
    landing: Path,
) -> None:
    home, repo, run = landed(landing)
    aftermath_of(home, run.id)
    person(repo, "revert", "--no-edit", run.landed_as)
    message = person(repo, "log", "-1", "--format=%s")
    after = aftermath_of(home, run.id)
    assert after["state"] == "reverted" and after["lines_kept"] == 0
    assert [(c["author"], c["message"], c["revert"]) for c in after["commits"]] == [
        ("Ann", message, True)
    ]


def test_a_revert_by_hand_is_found_by_its_inverse_patch(landing: Path) -> None:
    """No "This reverts commit" line: the commit's patch-id is the inverse of the run's."""
    home, repo, run = landed(landing)
    aftermath_of(home, run.id)
    person(repo, "checkout", "-q", f"{run.landed_as}~1", "--", "calc.py")
    person(repo, "commit", "-qm", "back to the old calc")
    after = aftermath_of(home, run.id)
    assert after["state"] == "reverted"
    commit = after["commits"][0]
    assert commit["revert"] and commit["message"] == "back to the old calc"


def test_a_squash_under_a_persons_name_keeps_the_run_and_a_rewrite_without_it_is_gone(
    landing: Path,
) -> None:
    home, repo, run = landed(landing)
    aftermath_of(home, run.id)
    base = git(repo, "rev-parse", f"{run.landed_as}~1")
    # The person rewrites main: the run's change again, as one commit of theirs (a rebase,
    # a squash): the same patch-id, another commit id.
    person(repo, "reset", "-q", "--hard", base)
    person(repo, "cherry-pick", "--no-commit", run.landed_as)
    person(repo, "commit", "-qm", "calc: add and twice (squashed)")
    copy = git(repo, "rev-parse", "HEAD")
    assert copy != run.landed_as
    kept = aftermath_of(home, run.id)
    assert kept["state"] == "kept" and kept["landed_commits"] == [copy]
    assert kept["lines_kept"] == kept["lines_landed"] == 5
    # Then main is rewritten again, without it.
    person(repo, "reset", "-q", "--hard", base)
    (repo / "README.md").write_text("other work\n")
    person(repo, "add", "README.md")
    person(repo, "commit", "-qm", "other work")
    gone = aftermath_of(home, run.id)
    assert gone["state"] == "gone"
    assert "gone: main was rewritten" in loopd(home.root, "aftermath", run.id).stdout


def test_the_daemon_keeps_each_window_by_the_clock_it_is_given(landing: Path) -> None:
    """The Follower (the daemon's tick) at fixed datetimes: the 1 and 7 day windows are kept
    as they stood; a revert on day 10 shows at 30 days, not at 7."""
    home, repo, run = landed(landing)
    at = run.finished
    assert at is not None
    clocks = Clocks()
    follower = Follower(context(home, clocks))
    follower.follow(at + timedelta(hours=1))
    record = load_aftermath(home.state_dir / "runs" / run.id)
    assert record is not None and record.state == "kept" and record.windows == {}

    day3 = at + timedelta(days=3)
    edit(repo, "    return total", "    return total  # sum", "comment", when=day3)
    follower.follow(at + timedelta(days=1, minutes=5))  # the day-1 window, before the edit
    follower.follow(at + timedelta(days=8))
    person(repo, "checkout", "-q", f"{run.landed_as}~1", "--", "calc.py")
    person(repo, "commit", "-qm", "take calc back", when=at + timedelta(days=10))
    # Not due yet (the target moved: followed anyway), then the 30-day window.
    follower.follow(at + timedelta(days=11))
    follower.follow(at + timedelta(days=31))
    record = load_aftermath(home.state_dir / "runs" / run.id)
    assert record is not None
    assert {k: v.state for k, v in record.windows.items()} == {
        "1d": "kept",
        "7d": "edited",
        "30d": "reverted",
    }
    assert record.state == "reverted"
    # The report counts the 7-day window: edited then, with the person's commit.
    report = build_report(StateStore(home.state_dir), at, at + timedelta(days=31))
    assert report.aftermath is not None
    lines = report.aftermath.lines()
    assert lines[0] == "- loop calc: kept after 7 days: 0 of 1 (0%), edited 1"
    assert lines[1].startswith(f"  - edited {run.id} by Ann: comment (")
    assert "## After landing" in render_markdown(report)
    # Past its last window the run is followed no more: nothing read, nothing written.
    mtime = (home.state_dir / "runs" / run.id / "aftermath.toml").stat().st_mtime_ns
    assert follower.follow(at + timedelta(days=40)).records == []
    assert (home.state_dir / "runs" / run.id / "aftermath.toml").stat().st_mtime_ns == mtime


def test_a_sweep_reads_only_the_commits_new_since_the_last_check(landing: Path) -> None:
    """A second sweep with the target unmoved reads no commit; a new one, only that one."""
    home, repo, run = landed(landing)
    store = StateStore(home.state_dir)
    now = datetime(2030, 1, 1, tzinfo=UTC)
    sweep(store, [run], now)
    edit(repo, "    return total", "    return total + 0", "plus zero")
    first = sweep(store, [run], now)
    edit(repo, "    return total + 0", "    return total", "minus zero")
    second = sweep(store, [run], now)
    assert [c.message for c in first.records[0].commits] == ["plus zero"]
    assert [c.message for c in second.records[0].commits] == ["plus zero", "minus zero"]
    assert first.records[0].state == "edited" and first.records[0].lines_kept == 4
    assert second.records[0].state == "kept"  # every line back as it landed
    assert second.records[0].lines_kept == 5


def test_reverts_are_listed_first_and_the_plain_reading_matches_the_models(
    landing: Path,
) -> None:
    home, repo, run = landed(landing)
    at = run.finished
    assert at is not None
    edit(repo, "    return total", "    return total  # sum", "a comment", when=at)
    person(repo, "checkout", "-q", f"{run.landed_as}~1", "--", "calc.py")
    person(repo, "commit", "-qm", "no, take it all back", when=at + timedelta(days=2))
    store = StateStore(home.state_dir)
    found = sweep(store, [run], at + timedelta(days=8), lambda loop: ("origin", "a"))
    record = found.records[0]
    assert record.state == "reverted" and record.agent == "a"
    report = build_report(store, at, at + timedelta(days=8))
    assert report.aftermath is not None
    lines = report.aftermath.lines()
    assert lines[0] == "- loop calc: kept after 7 days: 0 of 1 (0%), reverted 1"
    assert lines[1].startswith(f"  - reverted {run.id} by Ann: no, take it all back")
    assert lines[2].startswith(f"  - edited {run.id} by Ann: a comment")
    assert lines[3] == "- agent a: kept after 7 days: 0 of 1 (0%), reverted 1"
    as_json = report.model_dump(mode="json")["aftermath"]["loops"][0]
    assert as_json["total"] == 1 and as_json["counts"] == {"reverted": 1}
    # The read commands' plain path reads the same file to the same object and line.
    assert plain.FILE == AFTERMATH_FILE
    folder = home.state_dir / "runs" / run.id
    data = plain.read_plain(folder)
    assert data is not None
    assert plain.object_of(folder) == json.loads(json.dumps(aftermath_json(record), default=str))
    text = loopd(home.root, "report").stdout
    assert "After landing" in text and "no, take it all back" in text


# What a revert teaches ------------------------------------------------------------------------

REVERT_RULE = {
    "kind": "failure",
    "rule": "Do not add helpers such as `twice` to calc.py unasked: a person reverted them.",
    "why": "The maintainer reverted the landed run that added `twice` to calc.py.",
    "how_to_apply": "Change only what the task names in calc.py.",
    "trigger_intent": "Tasks that fix arithmetic in calc.py",
    "trigger_patterns": [r"(?i)\bcalc\.py\b"],
    "severity": "remind",
    "evidence": [{"path": "after-landing.md", "line": 1, "quote": "def twice(a):"}],
}


def test_a_revert_within_7_days_goes_through_a_post_mortem_into_trial(
    tmp_path: Path, model_server: Any
) -> None:
    model_server.script(default_reply)
    config = (
        f'[verifier]\nbase_url = "{model_server.base_url}"\nmodel = "critic-model"\n'
        'timeout = "20s"\njudge_timeout = "20s"\n'
    )
    case = land_case(tmp_path, agent=AGENT, land="merge", config=config)
    proc = loopd(case.home.root, "once", "calc", timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    store = case.home.state()
    run = next(store.iter_runs("calc"))
    assert run.landed
    # A rule fired in the run and the critic said it was followed (as run.toml records it).
    library = RuleLibrary(case.home.root / "rules")
    rule = Rule(
        rule="Read check.py first.", how_to_apply="Do it.", why="A person said so.", helped=1
    )
    rule_id = library.add(rule, "active").rule.id
    run.rules_fired = [rule_id]
    run.attempts[-1].rules_followed = [rule_id]
    store.save_run(run)
    assert aftermath_of(case.home, run.id)["state"] == "kept"
    assert model_server.chat_requests("postmortem_rule") == []  # kept: nothing to teach
    assert run.attempts[-1].judged and (run.attempts[-1].score or 0) >= 7
    kept = json.loads(loopd(case.home.root, "calibrate", "--field", "--json").stdout)
    assert (kept["field"]["landed"], kept["field"]["false_passes"]) == (1, 0)
    assert kept["warning"] == ""
    person(case.repo, "revert", "--no-edit", run.landed_as)
    model_server.add({"json": REVERT_RULE}, name="postmortem_rule")
    model_server.add({"json": AGREES}, name="rule_verification")

    proc = loopd(case.home.root, "aftermath", run.id)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "a post-mortem of its failure after landing" in proc.stdout
    asked = model_server.chat_requests("postmortem_rule")
    assert len(asked) == 1
    prompt = json.dumps(asked[0])
    assert f"This reverts commit {run.landed_as}" in prompt
    trial = sorted((case.home.root / "rules" / "trial").glob("*.md"))
    assert len(trial) == 1, [p.name for p in trial]
    text = trial[0].read_text()
    assert f'source_run = "{run.id}"' in text and "after-landing.md" in text
    # The rule it followed counts the run as harm now, not help.
    recounted = library.find(rule_id)
    assert recounted is not None
    assert (recounted.rule.helped, recounted.rule.harmed) == (0, 1)
    # The judge passed it and a person reverted it: a false pass in the field, with the
    # interval `loopd calibrate` gives its own rate, above max_false_pass: a warning.
    field = json.loads(loopd(case.home.root, "calibrate", "--field", "--json").stdout)
    assert field["field"]["landed"] == 1 and field["field"]["reverted"] == [run.id]
    assert field["field"]["false_pass_rate"] == 1.0
    assert field["field"]["false_pass_ci"] == list(wilson(1, 1))
    assert "max_false_pass" in field["warning"]
    text = loopd(case.home.root, "calibrate", "--field").stdout
    assert "judge in the field: 1 of 1 landed runs it passed were reverted (100%" in text
    status = " ".join(loopd(case.home.root, "status").stdout.split())  # unwrapped
    assert "judge in the field: 1 of 1 landed runs it passed were reverted" in status, status
    assert "field false-pass rate 100% is above [verifier] max_false_pass" in status
    check = loopd(case.home.root, "check")
    assert "of the landed runs a person then reverted" in " ".join(
        (check.stdout + check.stderr).split()
    )
    # Once taught, never again: the next look asks no model and counts nothing twice.
    aftermath_of(case.home, run.id)
    assert len(model_server.chat_requests("postmortem_rule")) == 1
    again = library.find(rule_id)
    assert again is not None and again.rule.harmed == 1


def test_a_pushed_run_is_pending_until_its_pull_request_is_merged_there(tmp_path: Path) -> None:
    """land = "push" to a bare remote: pending until the remote's main holds the run (a pull
    request merged there, seen by a fetch), then followed like a merge."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    make_repo(tmp_path / "repo", BUGGY)
    git(tmp_path / "repo", "remote", "add", "origin", str(remote))
    git(tmp_path / "repo", "push", "-q", "origin", "main")
    case = land_case(tmp_path, agent=AGENT, land="push")
    proc = loopd(case.home.root, "once", "calc", timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = next(case.home.state().iter_runs("calc"))
    assert run.landed and run.landed_how == "push"
    git(case.repo, "fetch", "-q", "origin")
    assert aftermath_of(case.home, run.id)["state"] == "pending"
    # The pull request is merged on the hosting side (a clone of the remote, a merge commit).
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", "-b", "main", str(remote), str(other))
    person(other, "merge", "-q", "--no-ff", "-m", "Merge pull request #1", f"origin/{run.branch}")
    person(other, "push", "-q", "origin", "main")
    assert aftermath_of(case.home, run.id)["state"] == "pending"  # not fetched yet
    git(case.repo, "fetch", "-q", "origin")
    merged = aftermath_of(case.home, run.id)
    assert merged["state"] == "kept" and merged["lines_kept"] == merged["lines_landed"] == 5


def test_a_record_cut_by_a_crash_is_made_again_from_git(landing: Path) -> None:
    """A kill -9 mid-write leaves the old file (atomic writes); a file cut anyway (a disk's
    fault) is named once and rebuilt from the run's record and git, the person's edit found."""
    home, repo, run = landed(landing)
    aftermath_of(home, run.id)
    edit(repo, "    return doubled", "    return int(doubled)", "twice: an int, always")
    path = home.state_dir / "runs" / run.id / AFTERMATH_FILE
    path.write_bytes(path.read_bytes()[:40])
    proc = loopd(home.root, "aftermath", run.id, "--json")
    assert proc.returncode == 0, proc.stderr
    assert f"cannot read {path}" in proc.stderr
    record = json.loads(proc.stdout)["aftermath"][0]
    assert record["state"] == "edited" and record["commits"][0]["author"] == "Ann"
    assert load_aftermath(path.parent) is not None


def test_the_daemons_sweep_neither_reads_nor_writes_a_run_whose_files_no_commit_touched(
    landing: Path,
) -> None:
    home, repo, run = landed(landing)
    store = StateStore(home.state_dir)
    now = datetime(2030, 1, 1, tzinfo=UTC)
    held: Held = {}
    sweep(store, [run], now, due_only=True, cache=held)
    path = home.state_dir / "runs" / run.id / AFTERMATH_FILE
    written = path.stat().st_mtime_ns
    (repo / "notes.txt").write_text("elsewhere\n")
    person(repo, "add", "notes.txt")
    person(repo, "commit", "-qm", "notes")
    quiet = sweep(store, [run], now, due_only=True, cache=held)
    assert quiet.records[0].last_seen == git(repo, "rev-parse", "main")
    assert path.stat().st_mtime_ns == written  # kept in memory until something happens
    edit(repo, "    return doubled", "    return int(doubled)", "twice: an int")
    loud = sweep(store, [run], now, due_only=True, cache=held)
    assert loud.records[0].state == "edited"
    assert [c.message for c in loud.records[0].commits] == ["twice: an int"]
    assert path.stat().st_mtime_ns != written
    on_disk = load_aftermath(path.parent)
    assert on_disk is not None and on_disk.state == "edited"


def test_a_run_merged_onto_a_moved_target_is_its_own_commits_and_a_revert_of_the_merge_counts(
    tmp_path: Path,
) -> None:
    """The target moved while the run worked: landing merged it into the run's branch. The
    run's identity is its own commits (not the person's in between); a `git revert -m 2` of
    the landing merge names the merge, and reverts the run."""
    talk = tmp_path / "talk"
    talk.mkdir()
    agent = AGENT + (
        f"import time\nt = pathlib.Path({str(talk)!r})\n(t / 'started').write_text('')\n"
        "while not (t / 'go').exists(): time.sleep(0.05)\n"
    )
    # The attempts' commits kept (land_commits = "keep"): the landing is a merge of the moved
    # target, the case this test is about; a squash is one commit (test_landing_tidy.py).
    sandbox = f'\n[sandbox]\nwritable = ["{talk}"]\n'
    case = land_case(tmp_path, agent, config=sandbox, land="merge", land_commits="keep")
    run = case.new_run()
    thread = threading.Thread(target=RunExecutor(case.services, case.loop, run).execute)
    thread.start()
    wait_for(lambda: (talk / "started").exists(), what="the agent to start")
    (case.repo / "NOTES.md").write_text("the person's own work\n")
    person(case.repo, "add", "NOTES.md")
    person(case.repo, "commit", "-q", "-m", "notes")
    (talk / "go").write_text("")
    thread.join(JOIN)
    ended = case.store.load_run(run.id)
    parents = git(case.repo, "rev-list", "--parents", "-n", "1", "main").split()[1:]
    assert ended.landed and len(parents) == 2  # landing merged the moved target
    first = aftermath_of(case.home, run.id)
    assert first["state"] == "kept" and first["lines_landed"] == 5
    assert ended.landed_as not in first["landed_commits"]  # the merge is not the run's change
    person(case.repo, "revert", "--no-edit", "-m", "2", ended.landed_as)
    after = aftermath_of(case.home, run.id)
    assert after["state"] == "reverted" and after["lines_kept"] == 0
    assert after["commits"][-1]["revert"]


def _escalations(home: Home) -> list[dict[str, Any]]:
    proc = loopd(home.root, "escalations", "list", "--all", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def test_two_reverts_in_7_days_send_a_merging_loop_back_to_branch_until_resolved(
    landing: Path,
) -> None:
    """revert_limit = 2 (the default): a person reverts two landed runs; the daemon's sweep
    holds the loop at `land = "branch"` with one escalation; the next run stays on its
    branch; resolving the escalation restores merging. The loop file is never rewritten."""
    home, repo, first = landed(landing)
    loop_file = home.root / "loops" / "calc.toml"
    before = loop_file.read_text()
    person(repo, "revert", "--no-edit", first.landed_as)
    proc = loopd(home.root, "once", "calc", timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    store = home.state()
    second = next(store.iter_runs("calc"))
    assert second.id != first.id and second.landed and second.land == "merge"
    person(repo, "revert", "--no-edit", second.landed_as)
    revert_message = person(repo, "log", "-1", "--format=%s")
    assert second.finished is not None
    now = second.finished + timedelta(hours=1)
    follower = Follower(context(home, Clocks()))
    follower.follow(now)
    follower.follow(now + timedelta(minutes=10))  # a second sweep files nothing more
    opened = [e for e in _escalations(home) if e["cause"] == "landings-reverted"]
    assert len(opened) == 1 and opened[0]["status"] == "open", opened
    escalation = opened[0]["run"]
    text = loopd(home.root, "escalations", "show", escalation).stdout
    assert first.id in text and second.id in text and revert_message in text
    assert f"loopd escalations resolve {escalation}" in text
    kinds = [json.loads(line)["type"] for line in (home.state_dir / "events.jsonl").open()]
    assert kinds.count("land_held") == 1
    status = " ".join(loopd(home.root, "status").stdout.split())  # unwrapped
    assert 'calc: lands as "branch", not "merge"' in status, status
    status_json = json.loads(loopd(home.root, "status", "--json").stdout)
    assert status_json["loops"]["calc"]["land_held"]["escalation"] == escalation
    check = loopd(home.root, "check")
    assert f"loopd escalations resolve {escalation}" in " ".join(
        (check.stdout + check.stderr).split()
    )

    # The next succeeded run stays on its branch: main does not move.
    main_before = git(repo, "rev-parse", "main")
    proc = loopd(home.root, "once", "calc", timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    third = next(store.iter_runs("calc"))
    assert third.outcome == "succeeded" and third.land == "branch" and not third.landed
    assert git(repo, "rev-parse", "main") == main_before
    assert git(repo, "rev-parse", "--verify", third.branch)
    assert loop_file.read_text() == before

    # Resolving restores it: the reverts already counted do not hold it again.
    done = loopd(home.root, "escalations", "resolve", escalation, "--note", "fixed the tests")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "land_held" not in json.loads(loopd(home.root, "status", "--json").stdout)["loops"]["calc"]
    )
    follower.follow(now + timedelta(minutes=20))
    assert len([e for e in _escalations(home) if e["cause"] == "landings-reverted"]) == 1
    proc = loopd(home.root, "once", "calc", timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fourth = next(store.iter_runs("calc"))
    assert fourth.land == "merge" and fourth.landed
    assert git(repo, "rev-parse", "main") == fourth.landed_as
    kinds = [json.loads(line)["type"] for line in (home.state_dir / "events.jsonl").open()]
    assert kinds.count("land_held") == 1 and kinds.count("land_restored") == 1


def test_a_target_seen_moving_is_followed_at_the_next_tick_not_in_5_minutes(
    landing: Path,
) -> None:
    """A push trigger (a hook, a poll) marks its repository's branch moved: the next tick
    sweeps the runs landed on it at once, before FOLLOW_EVERY is up; other targets wait."""
    home, repo, run = landed(landing)
    at = run.finished
    assert at is not None
    clocks = Clocks()
    ctx = context(home, clocks)
    follower = Follower(ctx)
    follower.tick(at + timedelta(minutes=1))  # the first look: every landed run
    follower.join()
    assert load_aftermath(home.state_dir / "runs" / run.id).state == "kept"  # type: ignore[union-attr]
    edit(repo, "    return doubled", "    return int(doubled)", "twice: an int")
    clocks.mono += 10  # far from the next 5-minute look
    follower.tick(at + timedelta(minutes=2))
    follower.join()
    assert load_aftermath(home.state_dir / "runs" / run.id).state == "kept"  # type: ignore[union-attr]
    ctx.targets_moved.add((str(repo.resolve()), "elsewhere"))  # another branch: not this run
    follower.tick(at + timedelta(minutes=3))
    follower.join()
    assert load_aftermath(home.state_dir / "runs" / run.id).state == "kept"  # type: ignore[union-attr]
    ctx.targets_moved.add((str(repo.resolve()), run.target))
    follower.tick(at + timedelta(minutes=4))
    follower.join()
    record = load_aftermath(home.state_dir / "runs" / run.id)
    assert record is not None and record.state == "edited" and not ctx.targets_moved


def test_a_push_trigger_marks_its_branch_moved_for_the_aftermath(landing: Path) -> None:
    """The intake's side: a push trigger of the loop names its repository and branch."""
    from daemon.scheduling.queue import RunQueue
    from daemon.service.intake import Intake
    from daemon.state.records import Trigger

    home, repo, run = landed(landing)
    ctx = context(home, Clocks())
    intake = Intake(ctx, RunQueue(), None, lambda loop: False)  # type: ignore[arg-type]
    push = Trigger(loop="calc", kind="push", reason="a push", ts=run.started, ref="refs/heads/main")
    intake.offer(push, run.started)
    assert (str(repo.resolve()), "main") in ctx.targets_moved


def test_a_daemon_killed_mid_sweep_finishes_the_records_at_its_restart_nothing_doubled(
    tmp_path: Path,
) -> None:
    """`loopd run` follows 80 landed runs of a real repository from scratch; kill -9 while
    it records them; the restarted daemon finishes every record, none counted twice."""
    import signal
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from aftermath import build, records  # bench/aftermath.py: its repository and runs

    case = land_case(tmp_path, agent=AGENT, land="merge")
    home = case.home
    big = tmp_path / "big"
    big.mkdir()
    git(big, "init", "-q", "-b", "main")
    shas = build(big, 20, 80, 200)
    git(big, "reset", "-q", "--hard", "main")
    store = home.state()
    made = records(big, shas)
    for run in made:
        store.save_run(run)
    ids = {r.id for r in made}

    def recorded() -> int:
        return sum((home.state_dir / "runs" / i / AFTERMATH_FILE).exists() for i in ids)

    proc = start_daemon(home.root)
    wait_for(lambda: recorded() >= 3, timeout=120, interval=0.01, what="the sweep under way")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = recorded()
    assert 3 <= partial < len(ids), partial  # killed while it was recording
    proc = start_daemon(home.root)
    try:
        wait_for(lambda: recorded() == len(ids), timeout=600, what="every record")
    finally:
        stop_daemon(proc)
    started = [
        e["run"] for e in map(json.loads, (home.state_dir / "events.jsonl").open())
        if e["type"] == "aftermath_started"
    ]  # fmt: skip
    assert max(started.count(i) for i in ids) == 1  # none begun twice
    assert not any(
        json.loads(line)["type"] == "aftermath_changed"
        for line in (home.state_dir / "events.jsonl").open()
    )
    for run_id in ids:
        record = load_aftermath(home.state_dir / "runs" / run_id)
        assert record is not None and record.state == "kept", run_id
        assert record.lines_kept == record.lines_landed == 5


def test_the_temporal_home_service_follows_landed_runs_too(landing: Path, temporal: Any) -> None:
    """`[engine] kind = "temporal"`: the home service's housekeeping runs the Follower, so a
    landed run's aftermath is recorded there as by the local daemon (a real dev server)."""
    from tests.machines import engine_toml

    server, namespace = temporal
    home, repo, run = landed(landing)
    config = home.root / "loopd.toml"
    config.write_text(config.read_text() + "\n" + engine_toml(server.address, namespace))
    edit(repo, "    return doubled", "    return int(doubled)", "twice: an int, always")
    proc = start_daemon(home.root)
    try:
        wait_for(
            lambda: (home.state_dir / "runs" / run.id / AFTERMATH_FILE).exists(),
            timeout=120,
            what="the aftermath recorded by the Temporal home service",
        )
    finally:
        stop_daemon(proc)
    record = load_aftermath(home.state_dir / "runs" / run.id)
    assert record is not None and record.state == "edited" and record.commits[0].author == "Ann"


def rename(repo: Path, old: str, new: str, message: str) -> str:
    person(repo, "mv", old, new)
    person(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def test_a_rename_by_a_person_keeps_the_lines_and_edits_after_it_count(landing: Path) -> None:
    """`git mv calc.py` then an edit of a run's line under the new name: kept through the
    rename (the rename is listed, nothing changed), edited after it, by `loopd aftermath`
    from scratch (one `git log` of the run's files, followed to the new name) and by the
    daemon's look (its range read once for all runs)."""
    home, repo, run = landed(landing)
    store = StateStore(home.state_dir)
    now = datetime(2030, 1, 1, tzinfo=UTC)
    held: Held = {}
    sweep(store, [run], now, due_only=True, cache=held)  # the daemon's first look
    moved = rename(repo, "calc.py", "arith.py", "calc.py is arith.py now")
    daemon_view = sweep(store, [run], now, due_only=True, cache=held).records[0]
    assert daemon_view.state == "kept" and list(daemon_view.lines) == ["arith.py"]
    assert (daemon_view.lines_kept, daemon_view.lines_landed) == (5, 5)
    assert [(c.commit, c.added, c.removed) for c in daemon_view.commits] == [(moved, 0, 0)]
    cli_view = aftermath_of(home, run.id)
    assert cli_view["state"] == "kept" and cli_view["lines_kept"] == 5

    path = repo / "arith.py"
    path.write_text(path.read_text().replace("    return doubled", "    return int(doubled)"))
    person(repo, "commit", "-qam", "twice: an int, in arith.py")
    daemon_view = sweep(store, [run], now, due_only=True, cache=held).records[0]
    assert daemon_view.state == "edited" and daemon_view.lines_kept == 4
    assert [c.message for c in daemon_view.commits] == [
        "calc.py is arith.py now",
        "twice: an int, in arith.py",
    ]
    # From scratch (the record gone): the run's file followed through the rename by git.
    (home.state_dir / "runs" / run.id / AFTERMATH_FILE).unlink()
    scratch = aftermath_of(home, run.id)
    assert scratch["state"] == "edited" and scratch["lines_kept"] == 4
    assert [(c["message"], c["added"], c["removed"]) for c in scratch["commits"]] == [
        ("calc.py is arith.py now", 0, 0),
        ("twice: an int, in arith.py", 1, 1),
    ]


def test_a_first_look_at_many_runs_from_one_history_log_equals_each_runs_own_log(
    tmp_path: Path,
) -> None:
    """`loopd aftermath` from scratch over many runs reads the target's history once (a
    single line of commits); what it finds is what each run's own `git log` finds: kept,
    edited by a person, reverted by `git revert`, renamed (that run's own log)."""
    import sys

    import daemon.aftermath.sweep as sweeping

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from aftermath import build, records  # bench/aftermath.py: its repository and runs

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = build(repo, 6, 12, 30)
    git(repo, "reset", "-q", "--hard", "main")
    runs = records(repo, shas)
    path = repo / "src" / "m0001.py"  # runs 1 and 7: one line of run 1 edited
    path.write_text(path.read_text().replace("    v1 = 11\n", "    v1 = 111\n"))
    person(repo, "commit", "-qam", "v1 of run 1, by hand")
    path = repo / "src" / "m0002.py"  # run 2 reverted by hand, the message naming it
    gone = {"def run_2():", *(f"    v{k} = {20 + k}" for k in range(4))}
    kept = [line for line in path.read_text().splitlines() if line not in gone]
    path.write_text("\n".join(kept) + "\n")
    person(repo, "commit", "-qam", f"Revert run 2\n\nThis reverts commit {shas[2]}.")
    person(repo, "mv", "src/m0003.py", "src/renamed.py")  # runs 3 and 9: renamed
    person(repo, "commit", "-qm", "m0003 is renamed")
    now = datetime(2030, 1, 1, 1, tzinfo=UTC)
    shared = sweeping.sweep(StateStore(tmp_path / "shared"), runs, now)
    own_logs = sweeping._from_history
    try:
        sweeping._from_history = lambda *args: None  # each run's own log, as before
        each = sweeping.sweep(StateStore(tmp_path / "each"), runs, now)
    finally:
        sweeping._from_history = own_logs
    assert not shared.failed and not each.failed
    assert [r.model_dump() for r in shared.records] == [r.model_dump() for r in each.records]
    states = {r.run[-2:]: r.state for r in shared.records}
    assert (states["01"], states["02"], states["03"], states["00"]) == (
        "edited",
        "reverted",
        "kept",
        "kept",
    )
