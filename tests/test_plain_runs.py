"""`loopd runs` and `loopd show` by the plain path (cli/plainruns.py): byte for byte what the
full path prints, for every kind of run a home holds; None (the full path) where it must."""

from __future__ import annotations

import json
import types
import typing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from daemon.people.landstate import LandingState
from daemon.plain import generated, tables
from daemon.plain.records import Unsure
from daemon.plain.runfile import checked
from daemon.state import records
from daemon.state.pruned import PrunedRun, append_pruned
from daemon.state.queuefile import PendingRun, QueueFile
from daemon.state.records import AttemptRecord, Park, RunRecord, RunTrigger, Trigger, Violation
from daemon.state.store import StateStore
from tests.helpers import both_paths, git, loopd, make_home, make_repo
from tests.test_daemon import BUGGY, FIXER, agent, loop_text

NOW = datetime(2026, 12, 4, 9, 30, 15, tzinfo=UTC)
WIDE = {"COLUMNS": "160"}


def _home(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo", BUGGY)
    loops = {"calc": loop_text(repo), "docs": loop_text(repo)}
    return make_home(tmp_path / "home", agent(FIXER), loops)


def _run(store: StateStore, loop: str, minutes: int, **fields: object) -> RunRecord:
    started = NOW + timedelta(minutes=minutes)
    given = {
        "trigger": RunTrigger(kind="schedule", reason="nightly", ts=started),
        "phase": "idle",
        **fields,
    }
    run = RunRecord(
        id=store.new_run_id(loop, started),
        loop=loop,
        task="Make check.py pass.\n",
        started=started,
        **given,  # type: ignore[arg-type]
    )
    store.save_run(run)
    return run


def _attempt(n: int, **fields: object) -> AttemptRecord:
    return AttemptRecord(n=n, started=NOW, finished=NOW + timedelta(minutes=2), **fields)  # type: ignore[arg-type]


def _many_runs(home: Path) -> dict[str, RunRecord]:
    """One run of each kind: succeeded (for review, landed, blocked), escalated, error,
    interrupted, parked, and one pruned, one queued."""
    store = StateStore(home / "state")
    done = {"outcome": "succeeded", "finished": NOW, "reason": "checks pass, score 8"}
    made = {
        "review": _run(
            store, "calc", 1, **done, branch="loopd/calc/x", land="branch",
            attempts=[_attempt(1, exit_code=0, checks_passed=True, score=8, verdict="fine")],
        ),
        "landed": _run(
            store, "calc", 2, **done, land="merge", target="main", landed=True,
            landed_how="merge", landed_as="a" * 40, cost_usd=0.25, tokens=1234,
        ),
        "blocked": _run(
            store, "docs", 3, **done, branch="loopd/docs/y", land="merge",
            landing="the target moved", rules_fired=["r-0001-tests"],
        ),
        "escalated": _run(
            store, "calc", 4, outcome="escalated", finished=NOW, cause="checks-failed",
            reason="attempts used up [bold]", attempts=[
                _attempt(1, exit_code=1, checks_passed=False, score=3, feedback="fails [x]"),
                _attempt(2, nudges=2, stalls=[{"kind": "silence", "at": NOW}]),
            ],
        ),
        "error": _run(store, "docs", 5, outcome="error", reason="loopd-error: boom"),
        "interrupted": _run(
            store, "calc", 6, outcome="interrupted", retry_not_run="the loop is paused",
            trigger=RunTrigger(kind="push", reason="push to main", merged_count=3),
        ),
        "parked": _run(
            store, "calc", 7, phase="waiting", resume_at=NOW + timedelta(hours=1), waited=60,
            park=Park(profile="fixer", attempt=1, started=NOW, since=NOW, message="limit"),
        ),
    }  # fmt: skip
    store.mark_live(made["parked"].id)
    gone = _run(store, "calc", -60, outcome="succeeded", branch="loopd/calc/old", tokens=9)
    append_pruned(store.root, PrunedRun.of(gone, NOW, 30, gone.branch, deleted=True))
    (store.run_dir(gone.id) / "run.toml").unlink()
    store.run_dir(gone.id).rmdir()
    made["pruned"] = gone
    pending = PendingRun(
        id="20261204T120000Z-docs-0001",
        loop="docs",
        trigger=Trigger(loop="docs", kind="manual", reason="by hand", ts=NOW),
        queued_at=NOW,
        merged=[Trigger(loop="docs", ts=NOW)],
    )
    store.save_queue(QueueFile(pending=[pending]))
    return made


def test_runs_and_show_of_every_kind_of_run_print_what_the_full_path_prints(
    tmp_path: Path,
) -> None:
    home = _home(tmp_path)
    empty_out, _ = both_paths(home, "runs")
    assert "runs in" in empty_out
    assert both_paths(home, "runs", "--json")[0] == "[]\n"
    made = _many_runs(home)
    for env in (WIDE, {"COLUMNS": "70"}):
        listed, _ = both_paths(home, "runs", env=env)
        assert all(run.id[:20] in listed for run in made.values())
    as_json = json.loads(both_paths(home, "runs", "--json")[0])
    phases = [row["phase"] for row in as_json]
    assert phases[:2] == ["queued", "waiting"] and phases[-1] == "pruned"
    assert len(as_json) == len(made) + 1
    for argv in (["calc"], ["docs", "--json"], ["--limit", "2"], ["--limit", "0", "--json"]):
        both_paths(home, "runs", *argv, env=WIDE)
    for name, run in made.items():
        shown, _ = both_paths(home, "show", run.id, env=WIDE)
        assert run.id in shown, name
        whole = json.loads(both_paths(home, "show", run.id, "--json")[0])
        assert whole["run"] == run.id, name


def test_show_prints_the_agents_decisions_and_a_real_run_alike(tmp_path: Path) -> None:
    home = _home(tmp_path)
    once = loopd(home, "once", "calc", timeout=180)
    assert once.returncode == 0, once.stdout + once.stderr
    (run_id,) = (p.name for p in (home / "state" / "runs").iterdir())
    (home / "state" / "runs" / run_id / "decisions.md").write_text("Kept [b]a + b[/b].\n")
    shown, _ = both_paths(home, "show", run_id, env=WIDE)
    assert "the agent's decisions" in shown and "[b]a + b[/b]" in shown
    both_paths(home, "show", run_id, "--json")
    both_paths(home, "runs", "calc", "--json")
    both_paths(home, "runs", env=WIDE)


def _declines(home: Path, *argv: str) -> None:
    proc = loopd(home, *argv, env={"LOOPD_READ_PATH": "only"})
    assert proc.returncode == 3, proc.stdout + proc.stderr


def test_the_plain_path_leaves_to_the_full_one_what_it_cannot_be_sure_of(tmp_path: Path) -> None:
    home = _home(tmp_path)
    store = StateStore(home / "state")
    broken = _attempt(1, violations=[Violation(kind="protected", target="check.py")])
    run = _run(store, "calc", 1, outcome="escalated", attempts=[broken])
    _declines(home, "show", run.id)  # a violation's text is the model's
    both_paths(home, "show", run.id, "--json")
    _declines(home, "show", run.id, "--diff")
    _declines(home, "show", "20991231T000000Z-calc-0000")  # unknown: the full path says so
    _declines(home, "runs", "nosuchloop")
    (store.run_dir(run.id) / "evidence.jsonl").write_text("{}\n")
    _declines(home, "show", run.id)
    # An older record: violations as text, which the model reads into records.
    path = store.run_dir(run.id) / "run.toml"
    path.write_text(path.read_text().replace("[[attempts.violations]]", "[[attempts.old]]"))
    with path.open("a") as fh:
        fh.write('\n[[attempts]]\nn = 2\nstarted = 2026-12-04T09:30:15Z\nviolations = ["x"]\n')
    _declines(home, "runs")
    path.write_text("not toml [")
    _declines(home, "runs")
    _declines(home, "show", run.id, "--json")
    assert "warning" in loopd(home, "runs").stderr  # the full path reports it


def test_a_branch_merged_by_hand_is_left_to_the_full_path_which_records_it(
    tmp_path: Path,
) -> None:
    home = _home(tmp_path)
    repo = tmp_path / "repo"
    base = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "-b", "loopd/calc/hand")
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git(repo, "commit", "-qam", "fix")
    git(repo, "checkout", "-q", "main")
    store = StateStore(home / "state")
    run = _run(
        store, "calc", 1, outcome="succeeded", finished=NOW, branch="loopd/calc/hand",
        land="branch", target="main", repo=str(repo), base_commit=base,
    )  # fmt: skip
    both_paths(home, "runs")  # not merged yet: the plain path answers
    both_paths(home, "show", run.id)
    git(repo, "merge", "-q", "--ff-only", "loopd/calc/hand")
    _declines(home, "runs")
    _declines(home, "show", run.id, "--json")
    shown = loopd(home, "show", run.id)
    assert "landed on main" in shown.stdout and "(by hand)" in shown.stdout
    assert store.load_run(run.id).landed_how == "by hand"
    both_paths(home, "show", run.id)  # recorded: the plain path answers again


# The tables and the models they are generated from (daemon/plain/tables.py).
MODELS = tables.RUN_TABLES


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_plain_tables_of_fields_are_the_models(name: str) -> None:
    """Each table of plain/generated.py: the model's fields in its order, their defaults, and
    the kind each annotation names."""
    spec, model = getattr(generated, name), MODELS[name]
    assert list(spec) == list(model.model_fields)
    for field, (kind, default) in spec.items():
        info = model.model_fields[field]
        if info.is_required():
            assert default == generated.REQUIRED, field
        else:
            assert default == info.get_default(call_default_factory=True), field
        assert _kind_of(info.annotation) == _kind_name(kind), field


def _kind_of(annotation: object) -> object:
    """A model annotation as the plain tables name it."""
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return ("opt", _kind_of(inner))
    if origin is list:
        return ("list", "table" if args[0] == dict[str, typing.Any] else _kind_of(args[0]))
    if origin is dict:
        return "strings"
    if origin is typing.Literal:
        return tuple(args)
    if isinstance(annotation, type) and issubclass(annotation, records.Cause):
        return tuple(c.value for c in annotation)
    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        return annotation.__name__
    return {str: "str", int: "int", float: "float", bool: "bool", datetime: "datetime"}[
        annotation  # type: ignore[index]
    ]


def _kind_name(kind: object) -> object:
    if isinstance(kind, dict):
        return next(m.__name__ for n, m in MODELS.items() if getattr(generated, n) is kind)
    if isinstance(kind, tuple) and kind[0] in ("opt", "list"):
        return (kind[0], _kind_name(kind[1]))
    return kind


def test_a_record_is_read_as_the_model_reads_it() -> None:
    """A whole record (every field set) and a bare one: the plain reading's JSON is the
    model's `model_dump(mode="json")`; one the model would coerce is left to it."""
    from daemon.plain.runfile import jsonable

    run = RunRecord(
        id="20261204T093015Z-calc-0001",
        loop="calc",
        task="t",
        trigger=RunTrigger(kind="push", merged=[{"kind": "push", "ts": NOW}]),
        started=NOW.replace(microsecond=120000),
        attempts=[_attempt(1, violations=[Violation(kind="too_large", target="big")])],
        park=Park(profile="p", attempt=1, started=NOW, since=NOW),
        refs_before={"refs/heads/main": "a" * 40},
        cause=records.Cause.TIMEOUTS,
        experiment=records.ExperimentArm(id="e", arm="all"),
        exposure=records.RunExposure(seeded=[records.SeededFile(path="a", sha256="b")]),
        base_tests=[records.TestCounts(ran=3)],
    )
    import tomllib

    from daemon.state.store import dump_toml

    data = tomllib.loads(dump_toml(run))
    assert jsonable(checked(data, generated.RUN)) == run.model_dump(mode="json")
    assert LandingState(**_landing(data)) == LandingState(state="none", why="the run has not ended")
    with pytest.raises(Unsure):
        checked({**data, "tokens": "12"}, generated.RUN)  # the model would make it 12


def _landing(data: dict) -> dict:
    from daemon.plain.landing import landing_fields
    from daemon.plain.runfile import View

    return landing_fields(View(checked(data, generated.RUN)))
