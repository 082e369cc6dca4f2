"""The console's ASGI application: Starlette's routes over the handlers of routes.py, and the
package's static files (no build step, nothing fetched at run time)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from daemon.state.parsed import keep_parsed
from daemon.web.console import HERE, Console, templates
from daemon.web.routes import Handlers
from daemon.web.runroutes import RunRoutes
from daemon.web.security import login_token

PARSED_KEPT = 1000  # run records kept parsed: a runs page lists 50, a night a few hundred


def build_app(console: Console) -> Any:
    """The Starlette application serving `console`."""
    from starlette.applications import Starlette
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    keep_parsed(PARSED_KEPT)  # the same run records are read request after request
    handlers = Handlers(console, templates())
    run_routes = RunRoutes(handlers)
    routes = [
        Route("/login", handlers.login, methods=["GET"]),
        Route("/", handlers.loops_page, methods=["GET"]),
        Route("/runs", handlers.runs_page, methods=["GET"]),
        Route("/runs/{run_id}", handlers.run_page, methods=["GET"]),
        Route("/escalations", handlers.escalations_page, methods=["GET"]),
        Route("/rules", handlers.rules_page, methods=["GET"]),
        Route("/report", handlers.report_page, methods=["GET"]),
        Route("/{name:str}.min.js", handlers.report_library, methods=["GET"]),
        Route("/api/{what}", handlers.api, methods=["GET"]),
        Route("/api/runs/{run_id}", handlers.api_run, methods=["GET"]),
        Route("/api/escalations/{run_id}", handlers.api_escalation, methods=["GET"]),
        Route("/escalations/{run_id}/resolve", handlers.resolve, methods=["POST"]),
        Route("/loops/{loop}/{action}", handlers.loop_action, methods=["POST"]),
        Route("/rules/{rule_id}/{action}", handlers.rule_action, methods=["POST"]),
        Route("/runs/{run_id}/live", run_routes.live, methods=["GET"]),
        Route("/runs/{run_id}/cancel", run_routes.cancel, methods=["POST"]),
        Route("/runs/{run_id}/land", run_routes.land, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(routes=routes)


def listener_app(home: Any, stopping: Callable[[], bool] = lambda: False) -> Any:
    """The console `[listen] ui = true` serves under /ui/: this home's, with its login token;
    `stopping` says when the listener stops (its live logs end then)."""
    console = Console(home=str(home.root), token=login_token(home.state_dir), stopping=stopping)
    return build_app(console)
