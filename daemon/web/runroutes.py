"""The run page's own routes: its live log by server-sent events, and the two actions on a run,
cancel (`loopd cancel RUN`) and land (`loopd land RUN`), each recorded with `by = "web"`."""

from __future__ import annotations

import asyncio
import re
import threading
from typing import Any

from daemon.web.commands import Outcome, run_command
from daemon.web.console import guard, post_guard, refusal
from daemon.web.livelog import ClientGone, LineSink, follow
from daemon.web.routes import HEADERS, Handlers

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")  # never an option to the command
KEEPALIVE = 15.0  # seconds: a comment line keeps proxies from closing a quiet stream
LOOK = 1.0  # seconds between a quiet stream's looks at whether the server is stopping
RECONNECT_MS = 3000  # how soon a browser opens a dropped stream again


def cancel(home: str, run_id: str, by: str) -> Outcome:
    """`loopd cancel RUN`; its `cancel_requested` event says who."""
    return run_command(home, ["cancel", run_id], by=by)


def land(home: str, run_id: str, by: str) -> Outcome:
    """`loopd land RUN`: setup and checks run again on what lands; `land_requested` says who."""
    return run_command(home, ["land", run_id], by=by)


def _event(kind: str, lines: list[str]) -> str:
    """One server-sent event: each line its own `data:` line (the browser joins them)."""
    head = f"event: {kind}\n" if kind != "message" else ""
    return head + "".join(f"data: {line}\n" for line in lines) + "\n"


class RunRoutes:
    """The handlers of /runs/RUN/live, /runs/RUN/cancel and /runs/RUN/land."""

    def __init__(self, handlers: Handlers) -> None:
        self.handlers, self.console = handlers, handlers.console

    async def live(self, request: Any) -> Any:
        """The run's transcript as `loopd logs -f` prints it, pushed as it is written; an
        `end` event when the run ends (the page stops following then)."""
        from starlette.responses import StreamingResponse

        refused = guard(self.console, request)
        if refused is not None:
            return refused
        run_id = request.path_params["run_id"]
        if not RUN_ID.fullmatch(run_id):
            return refusal(404, f"no run {run_id!r}")
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, list[str]]] = asyncio.Queue()
        gone = threading.Event()

        def put(kind: str, lines: list[str]) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, (kind, lines))
            except RuntimeError:  # the server's loop closed under a follow still going
                gone.set()

        def work() -> None:
            try:
                said = follow(
                    self.console.home, run_id, LineSink(lambda ls: put("message", ls), gone), gone
                )
            except ClientGone:
                return
            put("end", said.splitlines() or ["ended"])

        async def stream() -> Any:
            try:
                # Started with the stream, so its end (`finally`) always stops it; a thread of
                # its own, not the request pool's: a follow lasts as long as the attempt.
                threading.Thread(target=work, name=f"loopd-web-live-{run_id}", daemon=True).start()
                yield f"retry: {RECONNECT_MS}\n\n"
                quiet = 0.0
                while True:
                    try:
                        kind, lines = await asyncio.wait_for(queue.get(), LOOK)
                    except TimeoutError:
                        if self.console.stopping():
                            return  # no `end`: the page follows again once it is back
                        quiet += LOOK
                        if quiet >= KEEPALIVE:
                            quiet = 0.0
                            yield ": following\n\n"
                        continue
                    quiet = 0.0
                    yield _event(kind, lines)
                    if kind == "end":
                        return
            finally:
                gone.set()  # the follow stops at its next line or look

        headers = {**HEADERS, "X-Accel-Buffering": "no"}  # nginx: pass each line on at once
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    async def _run_action(self, request: Any, action: Any) -> Any:
        refused, _form = await post_guard(self.console, request)
        if refused is not None:
            return refused
        run_id = request.path_params["run_id"]
        if not RUN_ID.fullmatch(run_id):
            return refusal(404, f"no run {run_id!r}")
        return await self.handlers._act(request, action, f"runs/{run_id}", run_id)

    async def cancel(self, request: Any) -> Any:
        """Cancel a queued or running run."""
        return await self._run_action(request, cancel)

    async def land(self, request: Any) -> Any:
        """Land a succeeded run, its setup and checks run again on what lands."""
        return await self._run_action(request, land)
