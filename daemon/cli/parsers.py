"""Every command's arguments and help text, with no command's module imported.

`loopd --help` and `loopd COMMAND --help` answer from these modules and argparse alone (the
rule library's and the experiments' parsers are in `cli/learning_parsers.py`). Each command
names its function as "module:function" of daemon/cli/, imported once its command line is
parsed (cli/invoke.py). A command's help is its function's docstring, kept here as text:
tests/test_cli_commands.py fails when the two differ. A new command: its function in its
module, its parser here, in the group of that module.
"""

from __future__ import annotations

from typing import Any

from daemon.cli.arguments import add_home_and_json, command
from daemon.cli.learning_parsers import calibrate_parser, experiment_parser, rules_parser


def register(sub: Any) -> None:
    """Every command, in the order `loopd --help` lists them: a new user's path through them."""
    for group in (
        _home,
        _runs,
        _show,
        _logs,
        _branches,
        _daemon,
        _reload,
        _worker,
        _hooks,
        rules_parser,
        experiment_parser,
        calibrate_parser,
        _escalations,
        _web,
        _notify,
        _report,
        _redact,
        _systemd,
        _docs,
        _land,
        _aftermath,
        _verifier,
        _mcp,
    ):
        group(sub)


def _home(sub: Any) -> None:
    parser = command(sub, "init", "home:init", "Make a home with commented examples.")
    parser.add_argument("dir", nargs="?", help="the folder to make a home in (default: .)")
    parser.add_argument(
        "--repo",
        metavar="PATH",
        help="also write a loop for this git repository, as `loopd new` does (its name: "
        "--name, else the repository's folder name)",
    )
    parser.add_argument("--name", help="with --repo: the loop's name")
    _new_options(parser)
    new = command(
        sub,
        "new",
        "newloop:new",
        "Write loops/NAME.toml from what a repository holds, and try its checks.",
    )
    new.add_argument("name", metavar="NAME", help="the loop's name: loops/NAME.toml")
    new.add_argument("--repo", required=True, metavar="PATH", help="the git repository")
    _new_options(new)
    new.add_argument(
        "--force", action="store_true", help="write loops/NAME.toml again when it exists"
    )
    check = command(
        sub, "check", "home:check", "Validate loopd.toml and loops/*.toml.", json_flag=True
    )
    check.add_argument(
        "--env-file",
        default="",
        metavar="FILE",
        help="also warn for each key the home names that FILE (KEY=value lines, e.g. the "
        "systemd unit's EnvironmentFile) does not set",
    )
    check.add_argument(
        "--run-checks",
        action="store_true",
        help="also run each loop's setup and done_when on its base, in the sandbox a run "
        "gets, and report each check that fails for the environment (a module or program "
        "not found) as an error of the loop's file",
    )


def _new_options(parser: Any) -> None:
    """What `loopd new` and `loopd init --repo` share."""
    parser.add_argument(
        "--agent",
        metavar="NAME",
        help="the loop's agent (default: the only or first profile of loopd.toml, else qwen)",
    )
    parser.add_argument(
        "--check",
        action="append",
        metavar="COMMAND",
        help="a check for done_when instead of the guessed one (repeatable); needed when "
        "nothing in the repository says how its tests run",
    )
    parser.add_argument(
        "--task",
        help="what the agent should do (default: make the failing "
        "tests pass without weakening them)",
    )
    parser.add_argument(
        "--no-probe",
        action="store_true",
        help="do not run the checks on the repository's HEAD in the sandbox (by default "
        "they run once, as `loopd check --run-checks` does)",
    )


def _runs(sub: Any) -> None:
    p = command(
        sub,
        "once",
        "runs:once",
        "One full run now in the foreground; prints RUN_ID on its first line.",
    )
    p.add_argument("loop")
    p.add_argument("--reason", help="why, recorded with the run")
    p.add_argument(
        "--force",
        action="store_true",
        help="run it even when it is disabled, or when done_when already passes",
    )
    p = command(
        sub,
        "trigger",
        "runs:trigger",
        "Queue a run for the daemon and print its RUN_ID; --wait: exit as the run ends.",
    )
    p.add_argument("loop")
    p.add_argument("--reason", help="why, recorded with the run")
    p.add_argument(
        "--wait", action="store_true", help="exit as the run ends (0: succeeded or skipped)"
    )
    p.add_argument("--force", action="store_true", help="run even when done_when already passes")
    p = command(
        sub, "cancel", "runs:cancel", "Stop a queued or running run; its outcome is `cancelled`."
    )
    p.add_argument("run_id")


def _show(sub: Any) -> None:
    p = command(
        sub,
        "runs",
        "show:runs",
        "List runs: queued and parked ones first, then the rest, newest first.",
        json_flag=True,
    )
    p.add_argument("loop", nargs="?")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    p.add_argument(
        "--night",
        metavar="YYYY-MM-DD",
        help="only the runs of that night, noon to noon in [limits] timezone (as `loopd report`)",
    )
    p.set_defaults(plain="plainruns:runs")
    p = command(
        sub,
        "show",
        "show:show",
        "Show one run: trigger, attempts with checks, score, verdict, feedback; --diff: changes.",
        json_flag=True,
    )
    p.add_argument("run_id")
    p.add_argument("--diff", action="store_true", help="the changes each attempt made")
    p.add_argument("--attempt", type=int, metavar="N", help="with --diff: only attempt N")
    p.set_defaults(plain="plainruns:show")


def _logs(sub: Any) -> None:
    p = command(
        sub,
        "logs",
        "logs:logs",
        "The agent's transcript as readable text (tool output folded); -f follows it.",
        json_flag=True,
    )
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--attempt", type=int, metavar="N", help="only attempt N (default: every one)")
    p.add_argument(
        "-f", "--follow", action="store_true", help="follow the running attempt until it ends"
    )
    p.add_argument("--full", action="store_true", help="unfold tool output and long arguments")


def _branches(sub: Any) -> None:
    p = command(
        sub,
        "branches",
        "branches:branches",
        "List run branches (outcome, +/- lines, landed); --prune deletes landed and expired ones.",
        json_flag=True,
    )
    p.add_argument("loop", nargs="?", default="", help="only this loop's branches")
    p.add_argument(
        "--prune",
        action="store_true",
        help="delete branches that landed, and those of runs older than [limits] retain_days",
    )


def _web(sub: Any) -> None:
    p = command(
        sub,
        "web",
        "web:web",
        "The console in a browser: loops, runs, escalations, rules; --url: its login address.",
    )
    p.add_argument(
        "--bind",
        default="127.0.0.1:8790",
        metavar="HOST:PORT",
        help="where it listens (default 127.0.0.1:8790, this machine only)",
    )
    p.add_argument(
        "--read-only", action="store_true", help="show everything, refuse every action (POST)"
    )
    p.add_argument(
        "--url", action="store_true", help="print the address with the login token, and exit"
    )


def _daemon(sub: Any) -> None:
    command(sub, "run", "daemon:run", "The daemon, in the foreground (systemd runs this).")
    p = command(
        sub, "status", "daemon:status", "Loops, phases, last outcomes, next fires.", json_flag=True
    )
    p.add_argument("--watch", action="store_true", help="a live view that redraws as state changes")
    p.set_defaults(plain="plainstatus:status")
    p = command(
        sub,
        "pause",
        "daemon:pause",
        "Stop a loop's triggers from starting runs (they are recorded, not lost).",
    )
    p.add_argument("loop")
    p = command(sub, "resume", "daemon:resume", "Let a paused loop's triggers start runs again.")
    p.add_argument("loop")


def _reload(sub: Any) -> None:
    command(
        sub,
        "reload",
        "reload:reload",
        "Make the running daemon read loopd.toml and loops/ again and say what it loaded.",
        json_flag=True,
    )


def _worker(sub: Any) -> None:
    p = command(
        sub,
        "worker",
        "worker:worker",
        "Run attempts of the loops whose runs_on names --queue (default: the default queue).",
    )
    p.add_argument(
        "--queue",
        default="",
        metavar="NAME",
        help="the queue as a loop's runs_on names it (default: loops without runs_on)",
    )
    p.add_argument(
        "--metrics",
        default="",
        metavar="HOST:PORT",
        help="serve this worker's /metrics (Prometheus) and /healthz there; "
        "default: [listen] worker_bind of loopd.toml, else none",
    )


def _hooks(sub: Any) -> None:
    parser = sub.add_parser(
        "hooks",
        help="Git hooks that trigger on_push loops.",
        description="Git hooks that turn commits and pushes into triggers for on_push loops.",
    )
    add_home_and_json(parser, json_flag=False)
    parser.set_defaults(func=lambda _args: parser.print_help() or 2)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    p = command(
        actions,
        "install",
        "hooks:install_cmd",
        "Install git hooks for loops with on_push (or remove them with --uninstall).",
        json_flag=True,
    )
    p.add_argument("loop", nargs="?", metavar="LOOP", help="only this loop (default: all)")
    p.add_argument(
        "--uninstall", action="store_true", help="remove the hooks and put back what was there"
    )


def _escalations(sub: Any) -> None:
    parser = sub.add_parser(
        "escalations",
        help="Runs handed to a person: list, show, resolve.",
        description="Runs handed to a person: list, show, resolve RUN_ID [--retry] [--note].",
    )
    add_home_and_json(parser)
    parser.add_argument("--all", action="store_true", help="list resolved ones too")
    parser.set_defaults(
        func="escalations:list_escalations_cmd", plain="plainescalations:list_plain"
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    p = command(
        actions,
        "list",
        "escalations:list_escalations_cmd",
        "List the escalations waiting for a person (--all: resolved ones too).",
        json_flag=True,
    )
    p.add_argument("--all", action="store_true", help="resolved ones too")
    p.set_defaults(plain="plainescalations:list_plain")
    p = command(
        actions,
        "show",
        "escalations:show_escalation_cmd",
        "Show one escalation file: what happened and what to do next.",
        json_flag=True,
    )
    p.add_argument("run_id", metavar="RUN_ID")
    p.set_defaults(plain="plainescalations:show_plain")
    p = command(
        actions,
        "resolve",
        "escalations:resolve_escalation_cmd",
        "Resolve an escalation; --retry queues a new run whose prompt carries --note.",
    )
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--retry", action="store_true", help="queue a new run of the loop")
    p.add_argument("--note", default="", help="goes into the retry's prompt (# Note from a person)")
    p.add_argument(
        "--verdict",
        choices=("good", "bad"),
        help="your label of the run's last attempt, for `loopd calibrate --home-record`",
    )


def _notify(sub: Any) -> None:
    p = command(
        sub,
        "notify",
        "notify:notify_cmd",
        "Send a test notification through [notify] (--test) and say what happened.",
        json_flag=True,
    )
    p.add_argument("--test", action="store_true", help="send a test notification now")


def _report(sub: Any) -> None:
    parser = command(
        sub,
        "report",
        "report:report_cmd",
        "What happened since --since (default 12h; 7d with --html): runs, outcomes, rules.",
        json_flag=True,
    )
    parser.add_argument("--since", default=None, help="how far back, such as 12h or 2d")
    parser.add_argument("--html", metavar="FILE", help="write a page with charts to FILE")


def _redact(sub: Any) -> None:
    parser = command(
        sub,
        "redact",
        "redact:redact_file",
        "Print FILE (or standard input, `-`) as loopd keeps it: line by line, secrets redacted.",
    )
    parser.add_argument("file", metavar="FILE", help="the file to read; - for standard input")
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no count of what was replaced on stderr"
    )


def _systemd(sub: Any) -> None:
    parser = sub.add_parser(
        "systemd",
        help="The systemd user unit for this home.",
        description="`loopd systemd install`: the user unit for this home.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = command(
        actions,
        "install",
        "systemd:install_cmd",
        "Write the user unit for this home; enable it where a user bus exists; hint at linger.",
    )
    p.add_argument("--name", default="", help="unit name (default: loopd-<home folder>.service)")
    p.add_argument("--no-enable", action="store_true", help="write the unit, enable nothing")
    p.add_argument(
        "--print", dest="print_only", action="store_true", help="print the unit, write nothing"
    )


def _docs(sub: Any) -> None:
    p = command(
        sub,
        "docs",
        "docs:docs_cmd",
        "Print where the documentation is: the built site's index.html (--open: in a browser).",
    )
    p.add_argument("--open", action="store_true", help="open the site in a browser")


def _land(sub: Any) -> None:
    p = command(
        sub,
        "land",
        "land:land",
        "Land a succeeded run: its setup and checks run again on what lands, then merge or push.",
    )
    p.add_argument("run_id", metavar="RUN_ID", help="the succeeded run to land")


def _aftermath(sub: Any) -> None:
    p = command(
        sub,
        "aftermath",
        "aftermath:aftermath",
        "Print what became of each landed run on its target: kept, edited, reverted or gone.",
        json_flag=True,
    )
    p.add_argument("which", nargs="?", metavar="LOOP|RUN", help="one loop's runs, or one run")


def _mcp(sub: Any) -> None:
    command(
        sub,
        "mcp",
        "mcp:mcp_server",
        "Serve the agent's tools (record_evidence, ...) over MCP on stdio, for one run.",
    )


def _verifier(sub: Any) -> None:
    p = command(
        sub,
        "verifier",
        "verifier:verifier_cmd",
        "Try [verifier] now (--test): does base_url list its models and the configured model?",
        json_flag=True,
    )
    p.add_argument("--test", action="store_true", help="ask the verifier for its models now")
