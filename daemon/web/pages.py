"""What each page and each action asks of the commands: their command lines, and the rows the
templates draw from the commands' JSON. Nothing here reads state/ itself."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from daemon.redact import redact
from daemon.web.commands import Outcome, run_command

# The runs page's `--limit`, as `loopd runs` lists by default: each run listed is its run.toml
# read (about 1 ms of CPU each); `?limit=` asks for more, up to RUNS_MOST.
RUNS_SHOWN = 50
RUNS_MOST = 1000


class CommandFailed(Exception):
    """A command the page needs said no: its exit code and its words, redacted."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.text() or f"exit {outcome.code}")
        self.outcome = outcome


def read(home: str, *argv: str) -> Any:
    """A read command's `--json`, redacted; CommandFailed when it fails."""
    outcome = run_command(home, [*argv, "--json"])
    if not outcome.ok:
        raise CommandFailed(outcome)
    return outcome.data()


def status(home: str) -> Any:
    return read(home, "status")


def loops(home: str) -> list[dict[str, Any]]:
    """The loops of `loopd status --json`, each with its name, by name."""
    data = status(home)
    return [{"name": name, **info} for name, info in sorted(data.get("loops", {}).items())]


def runs_limit(asked: str) -> int:
    """The `--limit` of `?limit=`: RUNS_SHOWN unless a number, at most RUNS_MOST."""
    return min(int(asked), RUNS_MOST) if asked.isdigit() and int(asked) > 0 else RUNS_SHOWN


def runs(
    home: str, loop: str = "", outcome: str = "", night: str = "", limit: int = RUNS_SHOWN
) -> list[dict[str, Any]]:
    """`loopd runs [LOOP] [--night DATE] --limit N --json`, newest first as it lists them,
    kept to `outcome` if given."""
    argv = ["runs", *([loop] if loop else []), "--limit", str(limit)]
    argv += ["--night", night] if night else []
    items: list[dict[str, Any]] = read(home, *argv)
    return [r for r in items if not outcome or r.get("outcome") == outcome]


def run(home: str, run_id: str) -> Any:
    return read(home, "show", run_id)


NEXT_STEP = "**Suggested next step:**"  # the line of an escalation file that says it


def escalations(home: str) -> list[dict[str, Any]]:
    """The open escalations of `loopd escalations list --json`, oldest first, each with the
    next step its file suggests (`loopd escalations show ID --json`)."""
    items = escalations_list(home)
    for item in items:
        item["key"] = item.get("id") or item["run"]  # RUN_ID, or RUN_ID-qN for a question
        text = str(escalation(home, item["key"]).get("text", ""))
        steps = [line for line in text.splitlines() if line.startswith(NEXT_STEP)]
        item["next_step"] = steps[0][len(NEXT_STEP) :].strip() if steps else ""
    return sorted(items, key=lambda e: str(e.get("escalated") or ""))


def escalations_list(home: str) -> list[dict[str, Any]]:
    """`loopd escalations list --json`, as it prints it (the API's `/api/escalations`)."""
    items: list[dict[str, Any]] = read(home, "escalations", "list")
    return items


def escalation(home: str, run_id: str) -> Any:
    return read(home, "escalations", "show", run_id)


def rules(home: str) -> Any:
    """Every rule, retired and rejected ones too: `loopd rules list --all --json`."""
    return read(home, "rules", "list", "--all")


# The actions: each its command's line, run with `by` = who did it.
def resolve(home: str, run_id: str, note: str, retry: bool, by: str) -> Outcome:
    argv = ["escalations", "resolve", run_id, "--note", note, *(["--retry"] if retry else [])]
    return run_command(home, argv, by=by)


def loop_action(home: str, action: str, loop: str, by: str) -> Outcome:
    """`loopd trigger|pause|resume LOOP`; a trigger's reason names who asked for it."""
    reason = ["--reason", f"triggered from the console ({by})"] if action == "trigger" else []
    return run_command(home, [action, loop, *reason], by=by)


def rule_action(home: str, action: str, rule_id: str, by: str) -> Outcome:
    """`loopd rules promote|retire ID`; the rule's event says who in its reason."""
    reason = ["--reason", f"retired by a person ({by})"] if action == "retire" else []
    return run_command(home, ["rules", action, rule_id, *reason], by=by)


# A run's diff as `loopd show RUN --diff` prints it, each line with the class it is drawn in.
DIFF_LINES = 4000  # lines drawn; past them the page says how many more there were
DIFF_LINE_CHARS = 1000  # one line's characters drawn (a minified file is one long line)


class DiffLine(BaseModel):
    """One line of a run's diff and its class: add, del, hunk, file, note or ctx."""

    kind: str
    text: str


class Diff(BaseModel):
    """The lines drawn of a run's diff, and how many were left out."""

    lines: list[DiffLine]
    left_out: int = 0


def diff_kind(line: str) -> str:
    """The class a diff line is drawn in, as `loopd show --diff` colours it on a terminal."""
    if line.startswith("# "):
        return "note"  # show's own header per attempt, and "(no changes)"
    if line.startswith(("+++", "---", "diff --git", "index ")):
        return "file"
    if line.startswith("+"):
        return "add"
    if line.startswith("-"):
        return "del"
    if line.startswith("@@"):
        return "hunk"
    return "ctx"


def diff(home: str, run_id: str) -> Diff | None:
    """`loopd show RUN --diff`, redacted, as classed lines up to DIFF_LINES; None when the
    command has none to give (a pruned or unknown run: the page says so from `show`)."""
    outcome = run_command(home, ["show", run_id, "--diff"])
    if not outcome.ok:
        return None
    lines = outcome.out.splitlines()
    # Redacted after the cap: a diff of megabytes costs the page no more than its first lines.
    kept = redact("\n".join(lines[:DIFF_LINES])).splitlines()
    drawn = [DiffLine(kind=diff_kind(line), text=line[:DIFF_LINE_CHARS]) for line in kept]
    return Diff(lines=drawn, left_out=max(0, len(lines) - DIFF_LINES))


REPORT_PAGE = "report.html"  # in the console's own folder, with plotly's bundle beside it
_CSP = re.compile(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">')


class Report(BaseModel):
    """The page `loopd report --html` wrote, redacted, and the policy its scripts need."""

    html: str
    csp: str


def report(home: str, folder: str, since: str = "7d") -> Report:
    """`loopd report --html FOLDER/report.html --since SINCE`: the week's charts as that
    command draws them (plotly's bundle is written beside the page once, then kept)."""
    target = str(Path(folder) / REPORT_PAGE)
    outcome = run_command(home, ["report", "--html", target, "--since", since])
    if not outcome.ok:
        raise CommandFailed(outcome)
    html = redact(Path(target).read_text(encoding="utf-8"))
    found = _CSP.search(html)
    # The page's own policy (its inline scripts by hash), sent as a header too; no frames.
    csp = (found.group(1) if found else "default-src 'none'") + "; frame-ancestors 'none'"
    back = '<p class="meta"><a href="./">back to the console</a></p>\n'
    return Report(html=html.replace("<body>\n", "<body>\n" + back, 1), csp=csp)


def report_library(folder: str, stem: str) -> Path | None:
    """plotly's bundle the report page loads (`STEM.min.js`), as `loopd report --html` wrote
    it beside the page; None for any other name."""
    if not re.fullmatch(r"plotly-[0-9A-Za-z.+-]+", stem):
        return None
    path = Path(folder) / f"{stem}.min.js"
    return path if path.is_file() else None


REPORT_FRESH = 60.0  # seconds the /report page is served as made before it is made again


class KeptReport:
    """The /report page kept between requests: `loopd report --html` reads each run of the
    week (seconds of CPU at 10,000 runs), so a page older than REPORT_FRESH is served while
    the command makes the next one on a thread; the page says when it was made."""

    def __init__(self, make: Callable[[], Report], fresh: float = REPORT_FRESH) -> None:
        self.make, self.fresh = make, fresh
        self.kept: tuple[float, Report] | None = None
        self.lock = threading.Lock()
        self.making = False

    def get(self) -> Report:
        """The kept page (made now when there is none); an old one starts the next."""
        with self.lock:
            kept = self.kept
            stale = kept is not None and time.monotonic() - kept[0] > self.fresh
            start = stale and not self.making
            self.making = self.making or start
        if kept is None:
            return self._made()
        if start:
            threading.Thread(target=self._again, name="loopd-web-report", daemon=True).start()
        return kept[1]

    def _made(self) -> Report:
        report = self.make()  # CommandFailed goes to the page; nothing is kept of it
        with self.lock:
            self.kept = (time.monotonic(), report)
        return report

    def _again(self) -> None:
        try:
            self._made()
        except CommandFailed:
            with self.lock:
                self.kept = None  # the next request makes it, and shows why it cannot
        finally:
            with self.lock:
                self.making = False
