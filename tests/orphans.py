"""The long-lived processes a test session starts die with it, however it ends.

A Temporal dev server runs in a session of its own (so that a test's kill of a process group
never reaches it) and a `loopd run` a test starts outlives a test killed by a timeout: after an
interrupted `.ci/run` or test session either would be left running. Each is started with
`die_with_parent` as its preexec_fn: the kernel sends it SIGTERM when the thread that started
it ends (the test session's main thread: start them only from there).
"""

from __future__ import annotations

import ctypes
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """preexec_fn: SIGTERM this child when its parent's starting thread ends."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
