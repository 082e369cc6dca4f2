"""`git gc --auto` in the person's repositories loopd fetches into, run explicitly.

Every command of safe git sets `gc.auto=0` (an agent-provoked gc must never run inside a
run's commands, nor a hook it names), so a repository nobody else commits to would gain a
pack per run and never repack. The housekeeper runs this at most once a day per repository,
with the thresholds the repository's own config sets (git's defaults otherwise; a
repository whose config says `gc.auto = 0` is left alone, as the person asked).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from daemon.git.safe import GitError
from daemon.git.userrepo import UserRepo

GC_TIMEOUT = 1800.0  # seconds: a first repack of a large repository is slow
DEFAULTS = {"gc.auto": "6700", "gc.autoPackLimit": "50"}


@dataclass
class Maintained:
    """What one `gc --auto` did: packs before and after, and how long it took."""

    repo: str
    packs_before: int
    packs_after: int
    seconds: float
    skipped: str = ""  # why it did not run ("": it ran)


def packs(user: UserRepo) -> int:
    """The repository's pack count (`git count-objects -v`)."""
    for line in user.git.out("count-objects", "-v").splitlines():
        key, _, value = line.partition(":")
        if key == "packs":
            return int(value.strip() or 0)
    return 0


def _own_setting(user: UserRepo, key: str) -> str:
    """`key` as the repository's own config file sets it ("" when it does not)."""
    proc = user.git.run("config", "--file", str(user.common / "config"), "--get", key, check=False)
    return proc.stdout.decode("utf-8", "replace").strip()


def gc_auto(user: UserRepo) -> Maintained:
    """Run `git gc --auto` in the repository; git decides whether there is anything to do."""
    started = time.monotonic()
    before = packs(user)
    overrides: list[str] = []
    for key, default in DEFAULTS.items():
        value = _own_setting(user, key) or default
        if key == "gc.auto" and value == "0":
            return Maintained(str(user.common), before, before, 0.0, "gc.auto = 0 in its config")
        # Given after safe git's own `-c gc.auto=0`: the last value of a key wins.
        overrides += ["-c", f"{key}={value}"]
    user.git.run(*overrides, "gc", "--auto", "--quiet", timeout=GC_TIMEOUT)
    return Maintained(str(user.common), before, packs(user), time.monotonic() - started)


def maintain(user: UserRepo) -> Maintained:
    """`gc_auto`, with a failure raised as GitError (the caller records it)."""
    try:
        return gc_auto(user)
    except (OSError, ValueError) as exc:
        raise GitError(["gc", "--auto"], -1, str(exc)) from exc
