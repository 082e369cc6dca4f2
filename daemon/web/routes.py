"""The console's handlers: each page renders a command's `--json` (pages.py), each action runs
its command with `by = "web"` and goes back to the page it came from."""

from __future__ import annotations

import re
from functools import partial
from typing import Any
from urllib.parse import quote

from daemon.web import livelog, pages
from daemon.web.console import Console, guard, post_guard, refusal
from daemon.web.security import COOKIE, same

ACTIONS = ("trigger", "pause", "resume")
RULE_ACTIONS = ("promote", "retire")
NEXT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_./-]{0,200}")  # a page's path, no scheme, no //
BY = "web"  # who the events of the console's actions name
HEADERS = {
    # Only the console's own files; no frames, no referrer outside it.
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _next(request: Any) -> str:
    """Where a login goes on: `next`, a page of the console (relative, so never elsewhere)."""
    wanted = request.query_params.get("next", "")
    if NEXT.fullmatch(wanted) and ".." not in wanted:
        return "./" + wanted
    return "./"


class Handlers:
    """The routes' functions for one console."""

    def __init__(self, console: Console, templates: Any) -> None:
        self.console, self.templates = console, templates
        self.report = pages.KeptReport(partial(pages.report, console.home, console.folder))

    def _page(self, request: Any, name: str, status: int = 200, **values: Any) -> Any:
        from starlette.responses import HTMLResponse

        # Links are relative to the page, so the console works under a proxy's path prefix.
        # Counted below the mount point: under [listen]'s /ui/ the path starts with root_path.
        path = request.url.path[len(request.scope.get("root_path", "")) :]
        depth = path.count("/") - 1
        html = self.templates.get_template(name).render(
            root="../" * depth or "./",
            csrf=self.console.csrf,
            read_only=self.console.read_only,
            flash=self.console.said.get(request.query_params.get("said", ""), ""),
            **values,
        )
        return HTMLResponse(html, status_code=status, headers=HEADERS)

    async def _read(self, request: Any, name: str, reader: Any, *args: Any, **values: Any) -> Any:
        """A page of what `reader` gives, or the command's refusal as the page."""
        from starlette.concurrency import run_in_threadpool

        refused = guard(self.console, request)
        if refused is not None:
            return refused
        try:
            data = await run_in_threadpool(reader, self.console.home, *args)
        except pages.CommandFailed as exc:
            status = 404 if "unknown" in str(exc) or "no escalation" in str(exc) else 400
            return self._page(request, "error.html", status, message=str(exc))
        return self._page(request, name, data=data, **values)

    async def login(self, request: Any) -> Any:
        """`/login?token=...`: the token sets the session cookie; a wrong one counts as failed."""
        from starlette.responses import RedirectResponse

        address = request.client.host if request.client else "?"
        if self.console.limit.blocked(address):
            return refusal(429, "too many failed logins from this address; wait a minute")
        if not same(request.query_params.get("token"), self.console.token):
            self.console.limit.failed(address)
            return refusal(401, "wrong or missing token: open the address `loopd web --url` prints")
        response = RedirectResponse(_next(request), status_code=303, headers=HEADERS)
        response.set_cookie(
            COOKIE, self.console.session, httponly=True, samesite="strict", path="/"
        )
        return response

    async def loops_page(self, request: Any) -> Any:
        return await self._read(request, "loops.html", pages.loops)

    async def runs_page(self, request: Any) -> Any:
        loop = request.query_params.get("loop", "")
        outcome = request.query_params.get("outcome", "")
        night = request.query_params.get("night", "")
        limit = pages.runs_limit(request.query_params.get("limit", ""))
        return await self._read(
            request,
            "runs.html",
            pages.runs,
            loop,
            outcome,
            night,
            limit,
            loop_name=loop,
            outcome=outcome,
            night=night,
            limit=limit,
            more=min(limit * 4, pages.RUNS_MOST),
        )

    async def run_page(self, request: Any) -> Any:
        from starlette.concurrency import run_in_threadpool

        run_id = request.path_params["run_id"]
        refused = guard(self.console, request)
        if refused is not None:
            return refused
        diff = await run_in_threadpool(pages.diff, self.console.home, run_id)
        return await self._read(request, "run.html", livelog.run_with_log, run_id, diff=diff)

    async def escalations_page(self, request: Any) -> Any:
        return await self._read(request, "escalations.html", pages.escalations)

    async def rules_page(self, request: Any) -> Any:
        return await self._read(request, "rules.html", pages.rules)

    async def report_page(self, request: Any) -> Any:
        """`/report`: the week's charts, the page `loopd report --html` writes."""
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import HTMLResponse

        refused = guard(self.console, request)
        if refused is not None:
            return refused
        try:
            page = await run_in_threadpool(self.report.get)
        except pages.CommandFailed as exc:
            return self._page(request, "error.html", 400, message=str(exc))
        headers = {**HEADERS, "Content-Security-Policy": page.csp}
        return HTMLResponse(page.html, headers=headers)

    async def report_library(self, request: Any) -> Any:
        """plotly's bundle beside the report page, as the command wrote it."""
        from starlette.responses import FileResponse

        refused = guard(self.console, request)
        if refused is not None:
            return refused
        path = pages.report_library(self.console.folder, request.path_params["name"])
        if path is None:
            return refusal(404, "no such file: the report page names the one it loads")
        return FileResponse(
            path, media_type="text/javascript", headers={"Cache-Control": "private, max-age=86400"}
        )

    async def _json(self, request: Any, reader: Any, *args: Any) -> Any:
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import JSONResponse

        refused = guard(self.console, request)
        if refused is not None:
            return refused
        try:
            data = await run_in_threadpool(reader, self.console.home, *args)
        except pages.CommandFailed as exc:
            return JSONResponse({"error": str(exc)}, status_code=404, headers=HEADERS)
        return JSONResponse(data, headers=HEADERS)

    async def api(self, request: Any) -> Any:
        """`/api/status|runs|escalations|rules`: the command's `--json`, redacted."""
        readers = {
            "status": pages.status,
            "runs": pages.runs,
            "escalations": pages.escalations_list,  # as printed; the page adds next steps
            "rules": pages.rules,
        }
        reader = readers.get(request.path_params["what"])
        if reader is None:
            return refusal(404, "no such page: /api/status, runs, escalations, rules")
        if reader is pages.runs:  # `loopd runs [LOOP] [--night DATE] [--limit N]`
            query = request.query_params
            limit = pages.runs_limit(query.get("limit", ""))
            loop, night = query.get("loop", ""), query.get("night", "")
            return await self._json(request, reader, loop, "", night, limit)
        return await self._json(request, reader)

    async def api_escalation(self, request: Any) -> Any:
        """`/api/escalations/ID`: `loopd escalations show ID --json`, redacted."""
        return await self._json(request, pages.escalation, request.path_params["run_id"])

    async def api_run(self, request: Any) -> Any:
        """`/api/runs/RUN`: `loopd show RUN --json`, redacted."""
        return await self._json(request, pages.run, request.path_params["run_id"])

    async def resolve(self, request: Any) -> Any:
        """Resolve an escalation with the form's note, with a retry when asked for."""
        refused, form = await post_guard(self.console, request)
        if refused is not None:
            return refused
        run_id = request.path_params["run_id"]
        retry = form.get("retry") == "yes"
        note = str(form.get("note") or "")
        return await self._act(request, pages.resolve, "escalations", run_id, note, retry)

    async def loop_action(self, request: Any) -> Any:
        """Trigger, pause or resume a loop."""
        refused, _form = await post_guard(self.console, request)
        if refused is not None:
            return refused
        action = request.path_params["action"]
        if action not in ACTIONS:
            return refusal(404, f"no action {action!r}: trigger, pause or resume")
        return await self._act(request, pages.loop_action, "", action, request.path_params["loop"])

    async def rule_action(self, request: Any) -> Any:
        """Promote or retire a rule."""
        refused, _form = await post_guard(self.console, request)
        if refused is not None:
            return refused
        action = request.path_params["action"]
        if action not in RULE_ACTIONS:
            return refusal(404, f"no action {action!r}: promote or retire")
        rule_id = request.path_params["rule_id"]
        return await self._act(request, pages.rule_action, "rules", action, rule_id)

    async def _act(self, request: Any, action: Any, back: str, *args: Any) -> Any:
        """Run the action's command; back to the page, with what the command said."""
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import RedirectResponse

        outcome = await run_in_threadpool(partial(action, self.console.home, *args, BY))
        if not outcome.ok:
            return self._page(request, "error.html", 400, message=outcome.text())
        said = quote(self.console.keep_said(outcome.text()[:2000]))
        # Relative, so that it holds behind a proxy's path prefix: both forms are two deep.
        return RedirectResponse(f"../../{back}?said={said}", 303, headers=HEADERS)
