"""`loopd experiment` end to end: real runs of a `command` agent, arms with and without supports.

The agent fixes the right file only when its prompt's `# Rules from earlier runs` tells it
which one, so the arm without rules fails where the arm with every support passes, and the
report's Wilson intervals show it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from daemon.experiments.arms import arms_for, parse_supports, wilson
from daemon.rules.library import RuleLibrary
from daemon.rules.rulefile import Rule
from tests.helpers import events, git, loopd, make_home, make_repo, talk

REPO = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "legacy/calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5, f'add(2, 3) gave {add(2, 3)}'\n",
}
MARK = "the top-level calc.py"
AGENT = """\
import pathlib, sys
prompt = sys.stdin.read()
n = len(list(pathlib.Path(sys.argv[1]).glob("prompt-*.md")))
pathlib.Path(sys.argv[1], f"prompt-{n}.md").write_text(prompt)
rules = ""
if "# Rules from earlier runs" in prompt:
    rules = prompt.split("# Rules from earlier runs", 1)[1].split("\\n# ", 1)[0]
target = pathlib.Path("calc.py" if MARK in rules else "legacy/calc.py")
target.write_text(target.read_text().replace("a - b", "a + b"))
print(f"patched {target}")
"""
TASK = "Make check.py pass: add in calc.py returns the wrong sum."
CRITIC = {"score": 9, "verdict": "The checks decide.", "unsupported_claims": [], "feedback": "x"}


def setup(tmp_path: Path, server: Any, **loop: Any) -> tuple[Path, Path, Path]:
    """A home with loop `calc`, a hand-written active rule naming the right file."""
    # The agent keeps each prompt outside its tree, in a folder the sandbox lets it write.
    prompts, sandbox = talk(tmp_path)
    script = tmp_path / "agent.py"
    script.write_text(AGENT.replace("MARK", repr(MARK)))
    argv = [sys.executable, str(script), str(prompts)]
    config = (
        f'[verifier]\nbase_url = "{server.base_url}"\nmodel = "critic-model"\n'
        'timeout = "20s"\njudge_timeout = "20s"\npending_limit = "30s"\n\n'
        f'[agents.fixer]\nadapter = "command"\ncommand = {json.dumps(argv)}\n\n'
        f'[limits]\nmax_concurrent_runs = 2\nworktrees = "{tmp_path / "worktrees"}"\n'
        f"{sandbox}"
    )
    repo = make_repo(tmp_path / "repo", REPO)
    fields = {
        "repo": str(repo),
        "task": TASK,
        "agent": "fixer",
        "done_when": ["python3 check.py"],
        "attempt_timeout": "60s",
        "stall_after": "30s",
        "max_attempts": 1,
        "notify_on": ["escalated", "succeeded", "failed-attempt"],
        **loop,
    }
    text = "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items())
    home = make_home(tmp_path / "home", config, {"calc": text})
    RuleLibrary(home / "rules").add(
        Rule(
            trigger_intent="Fixing arithmetic in calc.py",
            trigger_patterns=[r"(?i)\bcalc\.py\b"],
            rule=f"Fix `add` in {MARK}; legacy/calc.py is dead code.",
            why="A person decided so.",
            how_to_apply="Edit calc.py.",
        ),
        "active",
    )
    return home, repo, prompts


def critic(body: dict[str, Any]) -> Any:
    from tests.model_server import call_name

    name = call_name(body)
    if name == "critic_verdict":
        return {"json": CRITIC}
    return {"status": 400, "message": f"an experiment run must not make a {name} call"}


def run_files(home: Path) -> list[dict[str, Any]]:
    return [
        tomllib.loads(p.read_text()) for p in sorted((home / "state" / "runs").glob("*/run.toml"))
    ]


def test_the_arm_without_rules_fails_where_every_support_passes(
    tmp_path: Path, model_server: Any
) -> None:
    model_server.script(critic)
    home, repo, prompts = setup(tmp_path, model_server)
    head = git(repo, "rev-parse", "HEAD")
    git(repo, "commit", "-q", "--allow-empty", "-m", "later work")  # --at picks the earlier one
    proc = loopd(home, "experiment", "calc", "--without", "rules", "--repeat", "5", "--at", head,
                 timeout=240)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    experiment_id = proc.stdout.splitlines()[0]
    folder = home / "state" / "experiments" / experiment_id
    report = json.loads((folder / "report.json").read_text())
    arms = {a["arm"]: a for a in report["arms"]}
    assert list(arms) == ["all", "no-rules"]
    assert report["commit"] == head and report["parallel"] == 2 and report["repeat"] == 5
    every, none = arms["all"], arms["no-rules"]
    assert (every["runs"], every["succeeded"], none["runs"], none["succeeded"]) == (5, 5, 5, 0)
    assert every["interval"] == pytest.approx(list(wilson(5, 5)))
    assert none["interval"] == pytest.approx(list(wilson(0, 5)))
    assert none["interval"][1] < every["interval"][0]  # the intervals do not overlap
    assert none["escalations"] == 5 and every["escalations"] == 0
    assert every["tokens"] == 0 and every["mean_wall_seconds"] > 0  # a command agent: no usage
    markdown = (folder / "report.md").read_text()
    assert "| all | 5/5 | 5 | 100% | 57% to 100% |" in markdown
    assert "| no-rules | 5/5 | 0 | 0% | 0% to 43% |" in markdown
    assert "without rules: 0% (all supports: 100%); worse without it" in markdown

    # Six ordinary run records, each from the same commit, each marked as its arm's.
    records = run_files(home)
    assert len(records) == 10
    assert {r["trigger"]["kind"] for r in records} == {"experiment"}
    assert {r["base_commit"] for r in records} == {head}
    assert sorted(r["experiment"]["arm"] for r in records) == ["all"] * 5 + ["no-rules"] * 5
    assert {r["experiment"]["id"] for r in records} == {experiment_id}
    with_rules = [r for r in records if r["experiment"]["arm"] == "all"]
    assert all(len(r["rules_fired"]) == 1 for r in with_rules)
    assert all(r["rules_fired"] == [] for r in records if r["experiment"]["arm"] == "no-rules")
    # The same critic judged every arm; nothing was learned, escalated, notified or counted.
    assert len(model_server.chat_requests("critic_verdict")) == 10
    assert model_server.chat_requests("postmortem_rule") == []
    assert list((home / "state" / "escalations").glob("*.md")) == []
    assert not (home / "state" / "progress" / "calc.md").exists()
    types = {e["type"] for e in events(home)}
    assert "escalated" not in types and "rule_promoted" not in types
    assert not {"notify_failed", "notified"} & types
    [rule] = RuleLibrary(home / "rules").rules(("active",))
    assert (rule.rule.fired, rule.rule.helped, rule.rule.harmed) == (0, 0, 0)
    assert list((home / "rules" / "trial").glob("*.md")) == []
    prompts_seen = sorted(p.read_text() for p in prompts.glob("*.md"))
    assert sum(MARK in p for p in prompts_seen) == 5


def test_arms_without_progress_feedback_and_nudges_lose_those_sections(
    tmp_path: Path, model_server: Any
) -> None:
    model_server.script(critic)
    home, repo, prompts = setup(tmp_path, model_server, max_attempts=2)
    (home / "state" / "progress").mkdir(parents=True, exist_ok=True)
    (home / "state" / "progress" / "calc.md").write_text("# Progress: calc\n\nEarlier notes.\n")
    (home / "rules" / "active").joinpath(next(iter(
        p.name for p in (home / "rules" / "active").glob("*.md")))).unlink()  # fmt: skip
    proc = loopd(home, "experiment", "calc", "--without", "progress,feedback,nudges",
                 "--repeat", "1", timeout=240)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = {r["experiment"]["arm"]: r for r in run_files(home)}
    assert sorted(records) == ["all", "no-feedback", "no-nudges", "no-progress"]

    def prompt(arm: str, n: int) -> str:
        path = home / "state" / "runs" / records[arm]["id"] / f"attempt-{n}" / "prompt.md"
        return path.read_text()

    assert "# Progress so far" in prompt("all", 1) and "Earlier notes." in prompt("all", 1)
    assert "# Progress so far" not in prompt("no-progress", 1)
    assert "# What failed last time" in prompt("all", 2)
    assert "# Reviewer feedback" in prompt("all", 2)
    assert "# What failed last time" not in prompt("no-feedback", 2)
    assert "# Reviewer feedback" not in prompt("no-feedback", 2)
    # The progress notes are the loop's, untouched by its experiment's runs.
    assert (home / "state" / "progress" / "calc.md").read_text().endswith("Earlier notes.\n")
    # Nudges: the arm's loop has max_nudges = 0, so a stop while the checks fail is not nudged.
    nudges = [e for e in events(home) if e["type"] == "nudge"]
    assert {e["run"] for e in nudges} <= {records[a]["id"] for a in records if a != "no-nudges"}
    assert all(a["nudges"] == 0 for a in records["no-nudges"]["attempts"])
    assert any(a["nudges"] > 0 for a in records["all"]["attempts"])


def test_loopd_experiment_makes_itself_undumpable(tmp_path: Path, model_server: Any) -> None:
    """Its agents and checks run as this user: they must not read loopd's memory or environ."""
    model_server.script(critic)
    home, _, _ = setup(tmp_path, model_server)
    probe = (
        "import ctypes, sys\n"
        "from daemon.cli.main import main\n"
        "rc = main(sys.argv[1:])\n"
        "print('rc', rc, 'dumpable', ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))\n"  # GET_DUMPABLE
    )
    argv = ["--home", str(home), "experiment", "calc", "--without", "rules", "--repeat", "1"]
    proc = subprocess.run(
        [sys.executable, "-c", probe, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert proc.stdout.splitlines()[-1] == "rc 0 dumpable 0", proc.stdout + proc.stderr
    assert len(run_files(home)) == 2


def test_a_bad_request_is_refused_before_any_run(tmp_path: Path, model_server: Any) -> None:
    home, _, _ = setup(tmp_path, model_server)
    for args, said in (
        (["--without", "rules,speed", "--repeat", "2"], "unknown support 'speed'"),
        (["--without", "rules", "--repeat", "0"], "--repeat must be at least 1"),
        (["--without", "rules", "--repeat", "1", "--at", "nope"], "--at nope: not a commit"),
    ):
        proc = loopd(home, "experiment", "calc", *args)
        assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert run_files(home) == []


def test_arms_and_the_wilson_interval() -> None:
    assert [a.name for a in arms_for(parse_supports("rules, nudges"))] == [
        "all",
        "no-rules",
        "no-nudges",
    ]
    low, high = wilson(3, 3)
    assert low == pytest.approx(0.4385, abs=1e-4) and high == 1.0
    low, high = wilson(0, 3)
    assert low == 0.0 and high == pytest.approx(0.5615, abs=1e-4)
    low, high = wilson(7, 10)
    assert (round(low, 4), round(high, 4)) == (0.3968, 0.8922)
    assert wilson(0, 0) == (0.0, 1.0)
