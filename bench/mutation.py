"""Bench: the share of mutants the tests kill in the decision modules (mutmut, pinned in `dev`).

    python bench/mutation.py [--only MODULE ...] [--sample N] [--children N] [--keep DIR] [--smoke]

Each module is mutated on its own, in a temporary copy of daemon/ and tests/ (mutmut 3
rewrites the code it mutates under `mutants/`; the checkout is never touched), and each
mutant runs only the unit tests listed for its module that reach the mutated function: the
selection must stay fast, since it runs once per mutant. A mutant counts as killed when a
test fails on it or it runs past its time limit (an endless loop is caught too); a mutant no
listed test reaches counts as surviving. Mutants known to be equivalent (no behaviour can
tell them apart) are left out of the share, by name in EQUIVALENT with the reason.
Prints each module's killed, surviving and excluded counts and the surviving mutants'
names (`mutmut show NAME` in a --keep folder prints the change). Target: 85% killed overall,
and 90% in each module that decides truth and trust (TRUST: landing guards, the check tree,
test counting and weighing, webhook signatures and the delivery desk, the deny list, program
exposure, event redaction, rule import, escalation repeats).
--sample N runs a random draw of N mutants a module (seeded by the module's name), an estimate
of the share for a machine that cannot spend an hour; the figure says so.
--smoke mutates one function of a small module: that the bench runs, in well under a minute.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from verdict import verdict  # noqa: E402

TARGET = 0.85

# Each mutated module with its unit tests: seconds in all, no daemon, no agent, no model.
MODULES: dict[str, list[str]] = {
    "daemon/runparts/decisions.py": ["tests/test_decisions.py", "tests/test_mutant_decisions.py"],
    "daemon/runs/budget.py": ["tests/test_budget.py", "tests/test_mutant_budget.py"],
    "daemon/scheduling/cron.py": ["tests/test_cron.py", "tests/test_mutant_scheduling.py"],
    "daemon/scheduling/queue.py": ["tests/test_queue.py", "tests/test_mutant_scheduling.py"],
    "daemon/rules/evaluator.py": [
        "tests/test_rules_evaluator.py",
        "tests/test_mutant_rules.py",
    ],
    "daemon/rules/verifier.py": ["tests/test_rules_verifier.py", "tests/test_mutant_rules.py"],
    # The verifier's prompt, related rules and word similarity, moved out of verifier.py.
    "daemon/rules/verifyprompt.py": [
        "tests/test_rules_verifier.py",
        "tests/test_mutant_rules.py",
    ],
    "daemon/rules/grounding.py": [
        "tests/test_grounding.py",
        "tests/test_rules_verifier.py",
        "tests/test_mutant_rules.py",
    ],
    "daemon/redact.py": [
        "tests/test_redact.py",
        "tests/test_redaction_sets.py",
        "tests/test_mutant_redact.py",
    ],
    # The modules that decide truth and trust (TRUST): what may land, the clean tree a verdict
    # comes from, what a test runner counted, who signed a webhook, what the sandbox hides,
    # what an event may hold, which shared rules are taken, which escalation a failure joins.
    "daemon/landing/guard.py": [
        "tests/test_landing_guard.py",
        "tests/test_mutant_survivors.py",
        "tests/test_mutant_trust.py",
    ],
    "daemon/runparts/checktree.py": ["tests/test_checktree.py"],
    "daemon/runparts/testcounts.py": ["tests/test_testcounts.py"],
    # weigh_tests and record_base need a run's check tree: test_checktree.py's last two.
    "daemon/runs/testweigh.py": [
        "tests/test_testcounts.py",
        "tests/test_testweigh.py",
        "tests/test_checktree.py::test_the_done_check_counts_the_base_and_weighing_uses_it",
        "tests/test_checktree.py::test_weighing_counts_the_base_in_the_check_tree_when_no_done_check_ran",
        "tests/test_checktree.py::test_weighing_each_check_allowing_fewer_tests_where_the_loop_says_so",
        "tests/test_checktree.py::test_a_base_that_was_not_counted_lets_no_empty_run_through",
    ],
    "daemon/scheduling/webhooks.py": ["tests/test_webhooks.py", "tests/test_webhook_desk.py"],
    "daemon/service/webhook_desk.py": ["tests/test_webhook_desk.py"],
    "daemon/sandbox/deny.py": ["tests/test_mutant_trust.py", "tests/test_sandbox_deny.py"],
    "daemon/sandbox/programs.py": ["tests/test_mutant_trust.py", "tests/test_sandbox_programs.py"],
    "daemon/state/events.py": [
        "tests/test_mutant_trust.py",
        "tests/test_state.py",
        "tests/test_events_log.py",
    ],
    "daemon/rules/sharing.py": ["tests/test_sharing.py"],
    "daemon/people/escalation_repeat.py": [
        "tests/test_mutant_trust.py",
        "tests/test_escalation_repeat.py",
    ],
}

# Each of these must reach TRUST_TARGET on its own (#44), besides the share overall.
TRUST = [
    "daemon/landing/guard.py",
    "daemon/runparts/checktree.py",
    "daemon/runparts/testcounts.py",
    "daemon/runs/testweigh.py",
    "daemon/scheduling/webhooks.py",
    "daemon/service/webhook_desk.py",
    "daemon/sandbox/deny.py",
    "daemon/sandbox/programs.py",
    "daemon/state/events.py",
    "daemon/rules/sharing.py",
    "daemon/people/escalation_repeat.py",
]
TRUST_TARGET = 0.90

# Tests of those files that start a daemon, a `loopd` process or an agent: seconds each,
# and what they reach in process is reached by the unit tests too.
DESELECT = [
    "tests/test_budget.py::test_a_spent_loop_budget_holds_new_runs_until_the_loops_next_day",
    "tests/test_budget.py::test_a_spent_home_budget_holds_every_loop_until_the_next_day_of_limits_timezone",
    "tests/test_budget.py::test_a_profiles_price_gives_cost_usd_per_attempt_and_run_and_in_the_report",
    "tests/test_budget.py::test_once_does_not_start_a_run_on_a_spent_budget",
    "tests/test_budget.py::test_check_warns_of_a_budget_on_an_agent_that_reports_no_usage",
]

# The smoke run: one small function of cron, with the few tests of cron that reach it.
SMOKE_MODULE = "daemon/scheduling/cron.py"
SMOKE_MUTANTS = "daemon.scheduling.cron.x__number*"
SMOKE_TESTS = [
    "tests/test_cron.py::test_month_and_weekday_names",
    "tests/test_cron.py::test_bad_expressions_name_the_field",
]

# Mutants no test can kill because no behaviour differs; each with why. Keep it short.
_STOPPED_READS = (
    "stopped() tells only 'cancelled' from other whys and only 'judging' or 'waiting' from "
    "other phases: any other literal behaves as 'interrupted' and 'running'"
)
_CRON = "daemon.scheduling.cron.x\u01c1"
_DESK = "daemon.service.webhook_desk.x\u01c1WebhookDesk\u01c1"
_COUNTS = "daemon.runparts.testcounts.x_"
_PROGRAMS = "daemon.sandbox.programs.x"
_GUARD = "daemon.landing.guard.x_"
_QUEUE = "daemon.scheduling.queue.x\u01c1RunQueue\u01c1"
_COUNTER = (
    "another start or step of a counter that is only compared (the queue's version for "
    "equality with the last one saved, arrivals for order): it still grows"
)
_CRON_FILLS = "CronTrigger fills an absent day or day_of_week with '*' when a finer field is given"
_WALK = (
    "the walk of Schedule._next_of: a wall time past the best fire's never maps to an "
    "earlier instant, so one more step, or an equal best taken, changes no result"
)
EQUIVALENT: dict[str, str] = {
    **{f"{_QUEUE}__init____mutmut_{n}": _COUNTER for n in (6, 9)},
    **{f"{_QUEUE}_add__mutmut_{n}": _COUNTER for n in (8, 12)},
    f"{_QUEUE}cancel_pending__mutmut_15": _COUNTER,
    f"{_QUEUE}next_ready__mutmut_23": _COUNTER,
    f"{_QUEUE}offer__mutmut_20": _COUNTER,
    **{
        f"{_CRON}CronExpression\u01c1parse__mutmut_{n}": (
            "zip's strict: the count of fields is checked to be five just before"
        )
        for n in (16, 19, 20)
    },
    **{f"{_CRON}CronExpression\u01c1trigger__mutmut_{n}": _CRON_FILLS for n in (27, 29, 32, 34)},
    **{f"{_CRON}Schedule\u01c1_next_of__mutmut_{n}": _WALK for n in (26, 35)},
    f"{_CRON}Schedule\u01c1_next_of__mutmut_10": (
        "the first wall time's zone: it is replaced by UTC before the trigger reads it"
    ),
    f"{_CRON}Schedule\u01c1next_fire__mutmut_2": (
        "`after` is only compared and converted as an aware time: its zone does not matter"
    ),
    "daemon.runs.budget.x_recent_spends__mutmut_10": (
        "i[:17] for i[:16]: a run id's 17th character is '-', so it orders as the stamp does"
    ),
    "daemon.runs.budget.x_loop_hold__mutmut_14": (
        "reading the spends when no budget is set: the same holds, only slower"
    ),
    "daemon.runs.budget.x_loop_hold__mutmut_21": "holds() does not read its config argument",
    **{
        f"daemon.rules.evaluator.x\u01c1PatternIndex\u01c1__init____mutmut_{n}": (
            "which of a literal's trigrams files its pattern, or whether a 3-character literal "
            "is filed or run on every task: each task still runs every pattern whose literal "
            "it holds (test_the_index_agrees_with_running_every_regex)"
        )
        for n in (20, 21, 22, 24, 25, 26, 41, 43)
    },
    "daemon.rules.verifier.x_candidate_from_file__mutmut_2": "require_id None for False",
    "daemon.redact.x__opens__mutmut_27": "'_' read as 'A' rather than 'a': both alphanumeric",
    "daemon.redact.x_redact_value__mutmut_1": (
        "a default name of 'XXXX' names no secret, as '' does"
    ),
    "daemon.redact.x__redact_closed__mutmut_141": (
        "the original's keywords for the redacted text: they only pick which provider rules "
        "run on the text itself, and the markers match none (tests/test_redaction_sets.py)"
    ),
    **{
        f"{_PROGRAMS}\u01c1_Walk\u01c1place__mutmut_{n}": (
            "a version manager's folder: the prefix of a bin/ and the parent of a shims/ "
            "are one folder (both here.parent.parent)"
        )
        for n in (48, 49, 50, 51, 52)
    },
    f"{_PROGRAMS}\u01c1_Walk\u01c1place__mutmut_60": "resolve=None for resolve=False",
    f"{_PROGRAMS}\u01c1_Walk\u01c1add__mutmut_9": "'/' is in MASK_ROOTS too",
    f"{_PROGRAMS}_shown__mutmut_12": "a HOME of '/' is '' once its slashes are trimmed",
    **{
        f"{_GUARD}changes__mutmut_{n}": (
            "--no-ext-diff, --no-textconv and a final `--`: a --raw diff of two commits runs "
            "neither and names no paths; zip's strict=False by another spelling; the old "
            "mode's colon stripped otherwise (only the new mode, parts[1], is read)"
        )
        for n in (17, 18, 25, 51, 54, 61, 62, 63)
    },
    **{
        f"{_GUARD}hooks_globs__mutmut_{n}": (
            "git config names are case-insensitive; whitespace stripped from a normpath that "
            "ends in no slash"
        )
        for n in (32, 33, 67)
    },
    **{
        f"{_GUARD}_holds_guarded__mutmut_{n}": (
            "resolve() never gives '' nor a path with a slash at either end"
        )
        for n in (2, 9, 10)
    },
    **{
        f"{_GUARD}_fixed_part__mutmut_{n}": "re.split's limit: only its first part is read"
        for n in (7, 13)
    },
    **{
        f"{_GUARD}{name}__mutmut_{n}": "'UTF-8' for 'utf-8': one codec"
        for name, n in (("_blob", 16), ("_entry", 29), ("changes", 42))
    },
    **{
        f"daemon.state.events.x\u01c1EventLog\u01c1repair__mutmut_{n}": (
            "the size one more, an empty file read, the tail read to the end rather than its "
            "window (from where it was sought), or a whole last line cut to its own length: "
            "each keeps the same bytes"
        )
        for n in (12, 14, 26, 28)
    },
    "daemon.rules.sharing.x__digest__mutmut_4": "'UTF-8' for 'utf-8': one codec",
    "daemon.rules.sharing.x__write__mutmut_8": "'UTF-8' for 'utf-8': one codec",
    f"{_COUNTS}_pytest__mutmut_9": (
        "every word read as a plural: only `warnings` ends in s among pytest's words, unread"
    ),
    f"{_COUNTS}_pytest__mutmut_12": "rstrip('XXsXX'): strips the same s from `errors`",
    f"{_COUNTS}_pytest__mutmut_19": (
        "a word's count added to nothing: pytest names each word once in its summary line"
    ),
    f"{_COUNTS}_unittest__mutmut_31": "rpartition('='): unittest's items hold one '=' each",
    f"{_COUNTS}_unittest__mutmut_33": (
        "keys unittest prints beyond the four (unexpected successes) are taken, never read; "
        "its values are always numbers"
    ),
    **{
        f"{_COUNTS}runner_of__mutmut_{n}": (
            "rsplit's limit: the last part of a path is the same whatever the split count"
        )
        for n in (8, 11)
    },
    **{
        f"{_COUNTS}runner_of__mutmut_{n}": (
            "the word after `-m` compared with pytest: that word is recognised on its own "
            "at the next step of the loop"
        )
        for n in (29, 32, 33)
    },
    **{
        f"{_DESK}_secret__mutmut_{n}": (
            "an unset secret_env read as None, or an empty name looked up in the environment "
            "(which never holds one): each reads as no secret, which verifies nothing"
        )
        for n in (2, 4, 6)
    },
    f"{_DESK}handle__mutmut_101": (
        "`name is None and remote is None`: both come from one pair, None together or not"
    ),
    f"{_DESK}_judge__mutmut_21": (
        "push_of without the kind: only the push's repository differs, and it is not read "
        "after the remote was found"
    ),
    **{
        f"{_DESK}_accept__mutmut_{n}": (
            "RemotePush.source of a delivery: nothing reads it (remotes.describe has no caller)"
        )
        for n in (37, 47, 48)
    },
    **{
        f"daemon.runparts.decisions.x_left_live__mutmut_{n}": _STOPPED_READS
        for n in (16, 17, 22, 23, 24, 25)
    },
}

# mutmut's exit codes (mutmut/stats.py): a failing test, pytest's internal error, a time limit.
KILLED_CODES = {1, 3}
TIMEOUT_CODES = {36, -24, 24, 152, 255}
NO_TESTS_CODES = {5, 33}


@dataclass
class Tally:
    """One module's mutants by fate."""

    module: str
    killed: list[str] = field(default_factory=list)
    survived: list[str] = field(default_factory=list)
    untested: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def counted(self) -> int:
        return len(self.killed) + len(self.survived) + len(self.untested) + len(self.unchecked)

    @property
    def share(self) -> float:
        return len(self.killed) / self.counted if self.counted else 0.0


def mutmut_config(module: str, tests: list[str]) -> str:
    """The [tool.mutmut] table for one module: only it mutated, only its tests run."""
    table = {
        "source_paths": ["daemon"],
        "only_mutate": [module],
        "pytest_add_cli_args_test_selection": tests,
        "pytest_add_cli_args": ["-p", "no:cacheprovider", *(f"--deselect={t}" for t in DESELECT)],
        "use_git_change_detection": False,
        "also_copy": ["bench", "docs"],
    }
    lines = ["", "[tool.mutmut]"] + [f"{key} = {json.dumps(value)}" for key, value in table.items()]
    return "\n".join(lines) + "\n"


def prepare(work: Path, module: str, tests: list[str]) -> None:
    """A copy of the code and the tests, with the repository's pyproject and mutmut's table."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "daemon", work / "daemon", ignore=ignore)
    shutil.copytree(ROOT / "tests", work / "tests", ignore=ignore)
    # Some tests read a bench's own code (tests/test_grounding.py: bench/grounding.py), or
    # compare a list with its documented copy (tests/test_sandbox_deny.py: docs/).
    shutil.copytree(ROOT / "bench", work / "bench", ignore=ignore)
    shutil.copytree(ROOT / "docs", work / "docs", ignore=ignore)
    pyproject = (ROOT / "pyproject.toml").read_text()
    (work / "pyproject.toml").write_text(pyproject + mutmut_config(module, tests))


def tally(work: Path, module: str, seconds: float, names: list[str]) -> Tally:
    """What mutmut recorded for the module's mutants (its .meta file), or for those named."""
    meta = json.loads((work / "mutants" / (module + ".meta")).read_text())
    out = Tally(module, seconds=seconds)
    for name, code in sorted(meta["exit_code_by_key"].items()):
        if names and not any(fnmatch.fnmatchcase(name, pattern) for pattern in names):
            continue
        if name in EQUIVALENT:
            out.excluded.append(name)
        elif code in KILLED_CODES or code in TIMEOUT_CODES:
            out.killed.append(name)
        elif code in NO_TESTS_CODES:
            out.untested.append(name)
        elif code is None:
            out.unchecked.append(name)
        else:
            out.survived.append(name)
    return out


def _mutmut(work: Path, children: int, names: list[str]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    # The copy's daemon/ and tests/, never the checkout's (mutmut puts mutants/ first).
    env.pop("PYTHONPATH", None)
    env.pop("CI", None)
    argv = [sys.executable, "-m", "mutmut", "run", "--max-children", str(children), *names]
    return subprocess.run(
        argv, cwd=work, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL
    )


def sampled(work: Path, module: str, children: int, size: int) -> list[str]:
    """`size` of the module's mutants, drawn at random with a seed of the module's name (the
    same draw each time the code is the same); [] when there are no more than that."""
    # A filter nothing matches makes mutmut write every mutant's name and stop before a test.
    dotted = module.removesuffix(".py").replace("/", ".")
    _mutmut(work, children, [f"{dotted}.none-such*"])
    meta = json.loads((work / "mutants" / (module + ".meta")).read_text())
    names = sorted(set(meta["exit_code_by_key"]) - set(EQUIVALENT))
    if len(names) <= size:
        return []
    return sorted(random.Random(module).sample(names, size))


def run_module(
    module: str, tests: list[str], children: int, keep: Path | None, names: list[str], sample: int
) -> Tally:
    """Mutate one module in a fresh copy and run its tests against each mutant (or a sample)."""
    base = Path(tempfile.mkdtemp(prefix="loopd-mutation-"))
    work = base / module.replace("/", "_").removesuffix(".py")
    work.mkdir()
    try:
        prepare(work, module, tests)
        started = time.monotonic()
        if sample and not names:
            names = sampled(work, module, children, sample)
        proc = _mutmut(work, children, names)
        seconds = time.monotonic() - started
        meta = work / "mutants" / (module + ".meta")
        if proc.returncode != 0 or not meta.exists():
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
            raise SystemExit(f"mutmut failed on {module} (exit {proc.returncode}):\n{tail}")
        return tally(work, module, seconds, names)
    finally:
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copytree(work, keep / work.name, dirs_exist_ok=True, symlinks=True)
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[], help="these modules only (paths)")
    parser.add_argument("--children", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--keep", type=Path, help="copy each module's work folder here")
    parser.add_argument("--smoke", action="store_true", help="one function of one module")
    parser.add_argument(
        "--sample", type=int, default=0, help="at most N mutants a module, drawn at random"
    )
    args = parser.parse_args()
    if args.smoke:
        plan = {SMOKE_MODULE: SMOKE_TESTS}
        names = [SMOKE_MUTANTS]
    else:
        unknown = sorted(set(args.only) - set(MODULES))
        if unknown:
            parser.error(f"not a bench module: {', '.join(unknown)} (see MODULES)")
        plan = {m: t for m, t in MODULES.items() if not args.only or m in args.only}
        names = []
    tallies = []
    for module, tests in plan.items():
        t = run_module(module, tests, args.children, args.keep, names, args.sample)
        tallies.append(t)
        own = f" (its own target {TRUST_TARGET:.0%})" if module in TRUST else ""
        print(
            f"{module}: {len(t.killed)}/{t.counted} killed ({t.share:.0%}), "
            f"{len(t.survived)} survived, {len(t.untested)} reached by no test, "
            f"{len(t.excluded)} equivalent, {t.seconds:.0f} s{own}",
            flush=True,
        )
        for name in t.survived + t.untested + t.unchecked:
            print(f"    surviving: {name}")
    stale = sorted(set(EQUIVALENT) - {n for t in tallies for n in t.excluded})
    if stale and not (args.smoke or args.only or args.sample):
        print(f"EQUIVALENT names no mutant has (the code moved?): {', '.join(stale)}")
    killed = sum(len(t.killed) for t in tallies)
    counted = sum(t.counted for t in tallies)
    share = killed / counted if counted else 0.0
    print(f"overall: {killed}/{counted} killed ({share:.1%})")
    figure = f"{share:.1%} of {counted} mutants killed"
    if args.sample:
        figure += f" (at most {args.sample} a module, drawn at random)"
    short = [t.module for t in tallies if t.module in TRUST and t.share < TRUST_TARGET]
    target = f">= {TARGET:.0%}"
    if any(t.module in TRUST for t in tallies):
        target += f", each of the trust modules >= {TRUST_TARGET:.0%}"
    if short:
        figure += f"; under {TRUST_TARGET:.0%}: {', '.join(short)}"
    return verdict(figure, target, share >= TARGET and not short, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
