"""A run's preparation, side by side: a private clone (today's default) vs a git worktree.

Target: the clone's preparation costs at most 1.5x the worktree's, wall and CPU, on a
repository of 20,000 files and about 200 MB of history (built once with git fast-import and
kept in --cache). Measured through loopd's own code (`daemon.git.tree.prepare_tree`, loopd's
git directory and the agent's git included) against the worktree preparation loopd did
before clones (`git worktree add -b BRANCH PATH BASE`). The order alternates each round;
CPU is this process's and its children's (git's) user + system time.

Usage: python bench/prepare.py [--rounds 5] [--cache DIR] [--out DIR] [--smoke]
"""

from __future__ import annotations

import argparse
import base64
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from verdict import verdict  # noqa: E402

from daemon.git.safe import git_environment  # noqa: E402
from daemon.git.tree import prepare_tree, remove_tree  # noqa: E402
from daemon.git.userrepo import LedgerWriter  # noqa: E402
from daemon.state.ledger import RefLedger  # noqa: E402

FILES, COMMITS, PER_COMMIT, BIG = 20_000, 250, 160, 6000
SMOKE_SIZES = (200, 5, 10, 600)  # files, commits, files a commit rewrites, bytes of each
TARGET = 1.5


def build_repo(
    path: Path, sizes: tuple[int, int, int, int] = (FILES, COMMITS, PER_COMMIT, BIG)
) -> None:
    """20,000 files; 250 commits each rewriting 160 files of ~6 KB of base64: ~200 MB packed."""
    files, commits, per_commit, big = sizes
    env = git_environment()
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True, env=env)
    proc = subprocess.Popen(
        ["git", "-C", str(path), "fast-import", "--quiet"], stdin=subprocess.PIPE, env=env
    )
    assert proc.stdin is not None
    write = proc.stdin.write
    rng = random.Random(1)
    paths = [f"src/pkg{i // 500:02d}/mod{(i // 50) % 10}/file{i:05d}.py" for i in range(files)]
    stamp = 1_700_000_000

    def commit(n: int, files: list[tuple[str, bytes]]) -> None:
        nonlocal stamp
        stamp += 60
        message = f"commit {n}\n".encode()
        write(b"commit refs/heads/main\n")
        write(f"author A <a@example.com> {stamp} +0000\n".encode())
        write(f"committer A <a@example.com> {stamp} +0000\n".encode())
        write(b"data %d\n%s" % (len(message), message))
        for name, data in files:
            write(b"M 644 inline %s\ndata %d\n%s\n" % (name.encode(), len(data), data))

    def blob(size: int) -> bytes:
        return base64.b64encode(rng.randbytes(size * 3 // 4))

    commit(0, [(p, blob(600)) for p in paths])
    for n in range(1, commits + 1):
        commit(n, [(p, blob(big)) for p in rng.sample(paths, per_commit)])
    proc.stdin.close()
    assert proc.wait() == 0
    subprocess.run(["git", "-C", str(path), "checkout", "-q", "main"], check=True, env=env)


def repo_size(path: Path) -> int:
    return sum(f.stat().st_size for f in (path / ".git").rglob("*") if f.is_file())


def cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def measure(work: Callable[[], None]) -> tuple[float, float]:
    wall, used = time.perf_counter(), cpu()
    work()
    return time.perf_counter() - wall, cpu() - used


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "loopd-bench"))
    parser.add_argument("--out", default="", help="where trees are made (default: a temp dir)")
    parser.add_argument("--smoke", action="store_true", help="a tiny repository, one round")
    args = parser.parse_args(argv)

    if args.smoke:
        # A repository of its own, not the cached full-size one, gone when the bench ends.
        args.rounds, args.cache = 1, tempfile.mkdtemp(prefix="loopd-prepare-smoke-")
    repo = Path(args.cache) / "prepare-repo"
    if not (repo / ".git").is_dir():
        print(f"building the repository in {repo} (once) ...", flush=True)
        shutil.rmtree(repo, ignore_errors=True)
        repo.parent.mkdir(parents=True, exist_ok=True)
        build_repo(repo, SMOKE_SIZES if args.smoke else (FILES, COMMITS, PER_COMMIT, BIG))
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-files"], capture_output=True, text=True, check=True
    ).stdout.count("\n")
    print(f"repository: {listed} files, {repo_size(repo) / 1e6:.0f} MB of git history")

    out = Path(args.out or tempfile.mkdtemp(prefix="loopd-prepare-"))
    out.mkdir(parents=True, exist_ok=True)
    ledger = RefLedger(out / "ledger.jsonl")
    env = git_environment()
    results: dict[str, list[tuple[float, float]]] = {"worktree": [], "clone": []}
    for n in range(args.rounds):
        order = ["worktree", "clone"] if n % 2 == 0 else ["clone", "worktree"]
        for kind in order:
            run_id = f"R{n}{kind[0]}"
            if kind == "worktree":
                path = out / "wt" / run_id
                argv = ["git", "-C", str(repo), "worktree", "add", "-q", "-b"]
                argv += [f"loopd/bench/{run_id}", str(path), "HEAD"]
                results[kind].append(measure(lambda a=argv: subprocess.run(a, check=True, env=env)))
                shutil.rmtree(path)
                subprocess.run(["git", "-C", str(repo), "worktree", "prune"], check=True, env=env)
            else:
                writer = LedgerWriter(ledger, lambda: datetime.now(UTC), run_id)
                made = []

                def clone(
                    run_id: str = run_id, writer: LedgerWriter = writer, made: list = made
                ) -> None:
                    made.append(
                        prepare_tree(repo, "bench", run_id, "clone", "HEAD", out / "cl", writer)
                    )

                results[kind].append(measure(clone))
                remove_tree(made[0])
            subprocess.run(
                ["git", "-C", str(repo), "branch", "-q", "-D", f"loopd/bench/{run_id}"],
                check=True,
                env=env,
                capture_output=True,
            )
        print(
            f"round {n + 1}: worktree {results['worktree'][-1][0]:.2f}s wall "
            f"{results['worktree'][-1][1]:.2f}s cpu | clone {results['clone'][-1][0]:.2f}s "
            f"wall {results['clone'][-1][1]:.2f}s cpu",
            flush=True,
        )
    if not args.out:
        shutil.rmtree(out, ignore_errors=True)
    if args.smoke:
        shutil.rmtree(args.cache, ignore_errors=True)

    def med(kind: str, i: int) -> float:
        return statistics.median(r[i] for r in results[kind])

    print(f"\n{'':10} {'wall (median)':>14} {'cpu (median)':>13}")
    for kind in ("worktree", "clone"):
        print(f"{kind:10} {med(kind, 0):>12.2f} s {med(kind, 1):>11.2f} s")
    wall_ratio = med("clone", 0) / med("worktree", 0)
    cpu_ratio = med("clone", 1) / med("worktree", 1)
    ok = wall_ratio <= TARGET and cpu_ratio <= TARGET
    print(
        f"clone / worktree: wall {wall_ratio:.2f}x, cpu {cpu_ratio:.2f}x "
        f"(target <= {TARGET}x): {'OK' if ok else 'OVER'}"
    )
    figure = f"clone / worktree preparation: wall {wall_ratio:.2f}x, cpu {cpu_ratio:.2f}x"
    return verdict(figure, f"<= {TARGET}x", ok, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
