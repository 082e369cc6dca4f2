"""Bench: an agent leaves a large file in its tree; loopd commits it, writes the attempt's diff,
and builds what people and the critic read. Print loopd's peak RSS.

    python bench/large_artefact.py [--mb 300] [--kind text|binary] [--smoke]

Target: the daemon's RSS stays <= 150 MB whatever the agent committed. The RSS figure is
this process's own (resource.getrusage RUSAGE_SELF): git's own memory is not loopd's.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

# Run alone as `python3 bench/large_artefact.py`: the checkout (daemon/, tests/) and bench/
# itself are importable however it is started.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from verdict import verdict  # noqa: E402

from daemon.git.diffs import record_diff  # noqa: E402
from daemon.git.safe import Git  # noqa: E402
from daemon.model.evidence import build_evidence  # noqa: E402
from daemon.people.digest import attempt_diffstat, format_stat  # noqa: E402
from daemon.people.escalation import write_escalation  # noqa: E402
from daemon.state.records import AttemptRecord, Cause, RunRecord, RunTrigger  # noqa: E402
from daemon.state.store import StateStore  # noqa: E402
from tests.helpers import commit_all, make_repo  # noqa: E402

CHUNK = 1 << 20


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def write_artefact(path: Path, mb: int, kind: str) -> None:
    """`mb` megabytes, written a chunk at a time: text lines of a log, or random bytes."""
    line = b"2026-11-30T02:00:00Z INFO request served in 12 ms from cache shard 7\n"
    block = line * (CHUNK // len(line))
    with path.open("wb") as out:
        for _ in range(mb):
            out.write(os.urandom(CHUNK) if kind == "binary" else block)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=300, help="size of the artefact")
    parser.add_argument("--kind", choices=("text", "binary"), default="text")
    parser.add_argument("--smoke", action="store_true", help="a 4 MB artefact: that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.mb = 4

    with tempfile.TemporaryDirectory(prefix="loopd-bench-") as tmp:
        root = Path(tmp)
        repo = make_repo(root / "repo", {"app.py": "print('hello')\n"})
        git = Git(repo)
        base = git.out("rev-parse", "HEAD")
        write_artefact(repo / "artefact.log", args.mb, args.kind)
        (repo / "app.py").write_text("print('hello, world')\n")
        rss_before = peak_rss_mb()
        started = time.perf_counter()
        head = commit_all(git, "loopd: bench attempt 1") or base
        committed = time.perf_counter()

        store = StateStore(root / "state")
        now = datetime.now(UTC)
        run_id = store.new_run_id("bench", now)
        folder = store.attempt_dir(run_id, 1)
        stat = record_diff(git, base, head, folder)
        diffed = time.perf_counter()

        attempt = AttemptRecord(n=1, started=now, finished=now, checks_passed=False, score=3)
        run = RunRecord(
            id=run_id,
            loop="bench",
            task="Write the access log summary.",
            trigger=RunTrigger(kind="manual", ts=now),
            started=now,
            finished=now,
            outcome="escalated",
            reason="attempts used up; checks still fail after 1 attempts",
            cause=Cause.CHECKS_FAILED,
            attempts=[attempt],
        )
        store.save_run(run)
        lines = format_stat(attempt_diffstat(folder) or stat)
        write_escalation(store, run, now)
        evidence = build_evidence(folder, run.task, "Wrote artefact.log.", 16000).render()
        read = time.perf_counter()

        print(f"artefact: {args.mb} MB ({args.kind})")
        print(f"diff.patch: {stat.patch_bytes} bytes, capped: {stat.patch_capped}")
        print(f"diffstat: {lines[-2] if stat.patch_capped else lines[-1]}")
        print(f"evidence: {len(evidence)} characters")
        print(
            f"commit: {committed - started:.1f}s, diff: {diffed - committed:.1f}s, "
            f"digest+escalation+evidence: {read - diffed:.2f}s"
        )
        print(f"peak RSS before: {rss_before:.0f} MB")
        print(f"peak RSS: {peak_rss_mb():.0f} MB (target <= 150 MB)")
    figure = f"peak RSS {peak_rss_mb():.0f} MB committing a {args.mb} MB artefact"
    return verdict(figure, "<= 150 MB", peak_rss_mb() <= 150, args.smoke)


if __name__ == "__main__":
    raise SystemExit(main())
