"""Work started on a thread of its own, joined where its result is needed.

A run's start is a chain of short waits (git processes, fsyncs). The steps whose results are
needed only later (the landing target, the person's git-lfs setup, a record's fsyncs) run
beside the steps that follow instead of before them; `loopd branches` asks git about two
repositories at once (landing/refbatch.py). `result()` joins and raises what the work raised,
where the result is needed: the caller sees the same values and errors as before.
"""

from __future__ import annotations

import _thread
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")


class Background(Generic[T]):
    """`function(*args)` started now on its own thread; `result()` waits for it.

    A bare thread (`_thread`): `threading.Thread.start()` waits until the new thread runs,
    which on a loaded machine costs the caller a scheduling round, the very wait this saves.
    """

    def __init__(self, function: Callable[..., T], *args: Any) -> None:
        self._value: T | None = None
        self._error: BaseException | None = None
        self._done = _thread.allocate_lock()
        self._done.acquire()
        _thread.start_new_thread(self._call, (function, args))

    def _call(self, function: Callable[..., T], args: tuple[Any, ...]) -> None:
        try:
            self._value = function(*args)
        except BaseException as exc:  # noqa: BLE001 - raised again by result()
            self._error = exc
        finally:
            self._done.release()

    def wait(self) -> None:
        """Wait for the work to end, whatever it gives."""
        with self._done:
            pass

    def result(self) -> T:
        """The work's value, once it is over; what it raised, raised here."""
        self.wait()
        if self._error is not None:
            raise self._error
        return cast(T, self._value)  # set by the thread once it has finished without error
