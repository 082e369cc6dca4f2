"""`loopd report`: what happened: runs, outcomes, rules learned, escalations waiting."""

from __future__ import annotations

import argparse
import html
import os
import tempfile
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from daemon.cli.common import CommandError, console, home_of
from daemon.cli.jsonout import print_json
from daemon.clock import utc_now
from daemon.landing.branches import notice_hand_merges
from daemon.landing.refbatch import RepoRefs, read_refs
from daemon.people.report import build_report, render_rich, write_report
from daemon.people.report_aftermath import AftermathReport, aftermath_report
from daemon.people.report_nights import count_nights
from daemon.units import parse_duration


def report_cmd(args: argparse.Namespace) -> int:
    """What happened since --since (default 12h; 7d with --html): runs, outcomes, rules."""
    since = args.since or ("7d" if args.html else "12h")
    try:
        window = parse_duration(since)
    except ValueError as exc:
        raise CommandError(f"--since: {exc}") from None
    home = home_of(args)
    store = home.state()
    now = utc_now()

    notice_hand_merges(store, now - window, now)  # a branch merged by hand is not waiting
    if args.html:
        return _html(home, store, now - window, now, Path(args.html))
    judge = _judge(home)
    report = build_report(store, now - window, now, home.rules_dir, BranchExists(), judge)
    write_report(store, report)
    if args.json:
        print_json(report.model_dump(mode="json"))
    else:
        render_rich(report, console())
    return 0


def _judge(home: Any) -> str:
    """The verifier's model, whose calibration the report puts beside verified attempts."""
    loaded = home.load()
    if not loaded.daemon_ok:
        return ""
    model, second = loaded.daemon.verifier.model, loaded.daemon.second_judge()
    return f"{model} + {second.model}" if second else model


class BranchExists:
    """Whether a branch is still in a repository: each repository's branches are read once
    (one `for-each-ref`), not once per run the report lists."""

    def __init__(self) -> None:
        self._refs: dict[str, RepoRefs | None] = {}

    def __call__(self, repo: str, branch: str) -> bool:
        if repo not in self._refs:
            self._refs[repo] = read_refs(Path(repo))
        refs = self._refs[repo]
        return refs is not None and bool(refs.tip(branch))


def _html(home: Any, store: Any, since: Any, now: Any, target: Path) -> int:
    """Write the HTML page, and plotly's bundle beside it when that folder has not the same
    one yet; plotly is imported only here, never by other commands."""
    from daemon.people.report_html import library, render_page

    tz = None
    loaded = home.load()
    zone = getattr(loaded.daemon.limits, "timezone", "")
    if zone:
        tz = ZoneInfo(zone)
    data = count_nights(store, home.rules_dir, since, now, tz, BranchExists(), _judge(home))
    name, bundle = library()
    page = _with_aftermath(render_page(data, name), aftermath_report(store, now))
    target = target.expanduser().resolve()
    if not target.parent.is_dir():
        raise CommandError(f"--html {target}: no folder {target.parent}")
    shared = target.parent / name
    if not _holds(shared, bundle):
        _write_beside(shared, bundle)
    _write_beside(target, page)
    print(
        f"wrote {target}: {data.total_runs} run(s) over {len(data.nights)} night(s), "
        f"{len(data.escalations)} open escalation(s), {len(data.ready)} branch(es) ready to land; "
        f"its charts load {name} beside it (one copy for the pages of that folder)"
    )
    return 0


def _holds(path: Path, text: str) -> bool:
    """Whether `path` is a regular file holding exactly `text` (the bundle already there)."""
    try:
        return path.is_file() and not path.is_symlink() and path.read_bytes() == text.encode()
    except OSError:
        return False


def _write_beside(target: Path, text: str) -> None:
    """`text` into `target` through a temporary file of its folder and a rename."""
    # Not write_atomic: that makes its folder 0700, and this folder is the person's own.
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _with_aftermath(page: str, found: AftermathReport | None) -> str:
    """The page with its "After landing" section (docs/aftermath.md) before its end."""
    if found is None or "</body>" not in page:
        return page
    items = "".join(f"<li>{html.escape(line.strip().lstrip('- '))}</li>" for line in found.lines())
    section = f'<section id="aftermath"><h2>After landing</h2><ul>{items}</ul></section>'
    head, _, tail = page.rpartition("</body>")
    return f"{head}{section}</body>{tail}"
