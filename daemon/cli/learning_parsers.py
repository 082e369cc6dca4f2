"""The parsers of the rule library (`loopd rules`), `replay`, `experiment` and `calibrate`:
what learns and what measures it (cli/parsers.py has the rest)."""

from __future__ import annotations

from typing import Any

from daemon.cli.arguments import add_home_and_json, command

DEFAULT_THRESHOLD = 7  # loops' critic_threshold default (docs/configuration.md)
STATUS_CHOICES = ("trial", "active", "rejected", "retired")  # the rule library's folders


def rules_parser(sub: Any) -> None:
    line = "The rule library: list, show, match, verify, promote, retire, export, import."
    parser = sub.add_parser("rules", help=line, description=line)
    add_home_and_json(parser)
    parser.set_defaults(func="rules:list_cmd", status=None, all=False)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    _rules_reading(actions)
    _rules_deciding(actions)
    _rules_sharing(actions)


def _rules_reading(actions: Any) -> None:
    p = command(
        actions,
        "list",
        "rules:list_cmd",
        "List the rules by kind (live ones: trial and active; --status or --all for others).",
        json_flag=True,
    )
    p.add_argument("--status", choices=STATUS_CHOICES, help="only this folder")
    p.add_argument("--all", action="store_true", help="rejected and retired ones too")
    p = command(
        actions,
        "show",
        "rules:show_cmd",
        "Show one rule: its file, its status and its version.",
        json_flag=True,
    )
    p.add_argument("id", metavar="ID")
    p = command(
        actions,
        "match",
        "rules:match_cmd",
        "Print the rules that would fire for a task, and why (pattern or model).",
        json_flag=True,
    )
    p.add_argument("task", nargs="?", metavar="TASK", help="the task text")
    p.add_argument("--task", dest="task_option", help="the task text (as the argument)")
    p.add_argument(
        "--loop", default="", help="apply the rules' scopes for this loop and its repository"
    )
    p.add_argument("--path", action="append", help="a changed path (repeatable)")
    p.add_argument("--no-model", action="store_true", help="the lexical stage only")


def _rules_deciding(actions: Any) -> None:
    p = command(
        actions,
        "verify",
        "rules:verify_cmd",
        "Run the rule verifier on a candidate rule file; exit 0 accepted, 1 rejected.",
        json_flag=True,
    )
    p.add_argument("candidate", metavar="CANDIDATE.md")
    p.add_argument("--evidence", required=True, metavar="DIR", help="the evidence files")
    p.add_argument("--no-model", action="store_true", help="skip the rule_verification call")
    p.add_argument("--dry-run", action="store_true", help="decide only: file nothing")
    p = command(
        actions,
        "promote",
        "rules:promote_cmd",
        "Make a rule active; --severity refuse|escalate and --scope all are a person's decisions.",
    )
    p.add_argument("id", metavar="ID")
    p.add_argument("--severity", choices=("remind", "refuse", "escalate"))
    p.add_argument(
        "--scope",
        choices=("all",),
        help="all: the rule applies to every repository, not only the one it was learned in",
    )
    p.add_argument(
        "--broad",
        action="store_true",
        help="promote it although a trigger pattern matches every task",
    )
    p = command(
        actions,
        "retire",
        "rules:retire_cmd",
        "Retire a rule: it stops firing; the file moves to rules/retired/.",
    )
    p.add_argument("id", metavar="ID")
    p.add_argument("--reason", default="retired by a person")


def _rules_sharing(actions: Any) -> None:
    p = command(
        actions,
        "export",
        "rules:export_cmd",
        "Write rules, with their provenance, as a bundle another home can import.",
        json_flag=True,
    )
    p.add_argument("dest", metavar="DEST", help="a new or empty folder, or an earlier bundle")
    p.add_argument("--kind", action="append", help="only this kind (repeatable)")
    p.add_argument(
        "--status", action="append", choices=STATUS_CHOICES, help="this folder (default: active)"
    )
    p = command(
        actions,
        "import",
        "rules:import_cmd",
        "Check a bundle, then file its rules in rules/trial/, firing nowhere until widened.",
        json_flag=True,
    )
    p.add_argument("src", metavar="SRC", help="a bundle's folder, or a git repository holding one")
    p.add_argument(
        "--no-model", action="store_true", help="skip the contradiction check with the verifier"
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="refuse the whole bundle when any rule is refused (default: skip it, take the rest)",
    )


def experiment_parser(sub: Any) -> None:
    p = command(
        sub,
        "replay",
        "experiment:replay_cmd",
        "Where rules would have fired on recorded runs' tasks, and how broadly (no model call).",
        json_flag=True,
    )
    p.add_argument("--since", default="30d", help="how far back, such as 30d or 12h")
    p.add_argument("--rule", metavar="FILE|ID", help="a candidate rule file, or a rule's id")
    p = command(
        sub,
        "experiment",
        "experiment:experiment_cmd",
        "Paired runs of a loop with every support and without each one; a report with intervals.",
    )
    p.add_argument("loop")
    p.add_argument(
        "--without",
        required=True,
        metavar="SUPPORTS",
        help="comma-separated: rules, progress, feedback, nudges (one arm without each)",
    )
    p.add_argument("--repeat", type=int, required=True, metavar="N", help="runs per arm")
    p.add_argument(
        "--at", metavar="COMMIT", help="the commit every run starts from (default: base)"
    )


def calibrate_parser(sub: Any) -> None:
    p = command(
        sub,
        "calibrate",
        "calibrate:calibrate_cmd",
        "Judge labelled attempts with the verifier; print false-pass and false-fail rates.",
        json_flag=True,
    )
    p.add_argument(
        "--model",
        action="append",
        metavar="PROFILE",
        help="judge with this profile: `verifier` or an [agents.NAME] (repeatable)",
    )
    p.add_argument("--cases", metavar="DIR", help="a folder of case folders (default: shipped)")
    p.add_argument(
        "--home-record",
        action="store_true",
        help="label the home's own attempts by their outcome instead of the shipped set",
    )
    p.add_argument(
        "--field",
        action="store_true",
        help="the judge in the field: landed runs it passed that a person reverted",
    )
    p.add_argument("--limit", type=int, metavar="N", help="judge only the first N cases")
    p.add_argument(
        "--threshold",
        type=int,
        default=DEFAULT_THRESHOLD,
        choices=range(11),
        metavar="0-10",
        help=f"a score at or above this passes (critic_threshold; default {DEFAULT_THRESHOLD})",
    )
