"""The daemon's parts facing hosted repositories: the remote feed and poller, the listener.

The feed and the poller run whenever a loop follows a remote; the listener (webhooks,
/metrics, /healthz) only when loopd.toml has a `[listen]` table; the runs' traces only with
`[telemetry] otlp_endpoint` (daemon/service/tracing.py). Each reads the current
configuration through the Context, so a reload's loops and remotes apply at once; `bind`
waits for a restart.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

from daemon.scheduling.remotes import RemoteFeed, RemotePoller
from daemon.service.context import Context
from daemon.service.listener import Listener
from daemon.service.metrics import Metrics
from daemon.service.tracing import start_tracing
from daemon.service.webhook_desk import WebhookDesk
from daemon.state.deliveries import DELIVERIES_NAME, Deliveries
from daemon.state.eventtypes import Event


class Outside:
    """Started by `Daemon.start()` and by the Temporal home (homeoutside.py); stopped by both."""

    def __init__(self, ctx: Context, feed: RemoteFeed, poller: RemotePoller) -> None:
        self.ctx = ctx
        self.feed = feed
        self.poller = poller
        self.listener: Any = None
        self.metrics: Any = None
        self.tracing: Any = None
        self.desk: WebhookDesk | None = None
        self.last_tick = time.monotonic()

    @classmethod
    def start(
        cls,
        ctx: Context,
        now: datetime,
        gauges: Callable[[], dict[str, float]],
        healthy: Callable[[], bool],
        workers_only: bool = False,
        ui: Callable[[Any, Callable[[], bool]], Any] | None = None,
    ) -> Outside:
        """ConfigFatal (exit 2) when [listen] cannot bind (a missing extra: `load_config`).
        `workers_only`: a `[listen]` that sets nothing but `worker_bind` is the workers'
        (the Temporal home then serves no listener). `ui(home)` makes the console's app that
        `[listen] ui = true` serves under /ui/ (the commands' layer builds it: daemon/web)."""
        feed = RemoteFeed(
            ctx.store,
            loops=lambda: ctx.loops,
            remotes=lambda: ctx.config.daemon.remotes,
            clock=ctx.clock,
            event=ctx.event,
        )
        outside = cls(ctx, feed, RemotePoller(feed, ctx.store.root, ctx.monotonic))
        if ctx.config.daemon.engine.kind == "local":
            # A delivery's triggers go to the inbox at once; its run waits for the fetch
            # before making its tree (a Temporal run's tree is made elsewhere: fetch first).
            feed.early_triggers = True
            feed.wake = ctx.flags.wake.set
            ctx.services.remote_fetch = feed.wait_fetched

        outside.tracing = start_tracing(ctx.config.daemon.telemetry, ctx.store)
        listen = ctx.config.daemon.listen
        if listen is not None and not (workers_only and listen.model_fields_set <= {"worker_bind"}):
            desk = WebhookDesk(
                loops=lambda: ctx.loops,
                remotes=lambda: ctx.config.daemon.remotes,
                deliveries=Deliveries(ctx.store.root / DELIVERIES_NAME, now),
                feed=feed,
                clock=ctx.clock,
                event=ctx.event,
                monotonic=ctx.monotonic,
                space=ctx.store.space,
            )
            outside.desk = desk

            def all_gauges() -> dict[str, float]:
                return {**gauges(), "heartbeat_age_seconds": time.monotonic() - outside.last_tick}

            metrics = Metrics(ctx.store, ctx.home.rules_dir, all_gauges)
            metrics.webhooks = lambda: Counter(desk.counts)
            ctx.store.events.observers.append(metrics.observe)
            listener = Listener(listen, desk, metrics, healthy, ctx.monotonic)
            if listen.ui and ui is not None:
                # The console's live logs end when the listener stops: they would hold it.
                listener.ui = ui(ctx.home, listener.stopping)
            listener.start()
            outside.listener, outside.metrics = listener, metrics
            ctx.event(Event.LISTENING, bind=listen.bind, port=listener.port)
        feed.start()
        outside.poller.start()
        return outside

    def ticked(self) -> None:
        """The daemon ticked: /metrics' heartbeat age starts again; the refusals counted in
        a minute that is over are written."""
        self.last_tick = time.monotonic()
        if self.desk is not None:
            self.desk.flush()

    def alive(self) -> bool:
        return self.listener is None or self.listener.alive()

    def stop(self) -> None:
        if self.listener is not None:
            self.listener.stop()
        self.poller.stop()
        self.feed.stop()
        if self.tracing is not None:
            self.tracing.close()
