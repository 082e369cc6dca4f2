"""A `loopd worker`'s /metrics and /healthz: the daemon's listener and counters, for its attempts.

The address is `loopd worker --metrics HOST:PORT`, else `[listen] worker_bind` of this
machine's loopd.toml; neither: no listener. The counters follow this worker's own event log
(`Metrics(per_attempt=True)`), so they count the attempts this machine ran, from its start.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from daemon.config import LoadedConfig
from daemon.extras import install_command
from daemon.service.context import ConfigFatal
from daemon.state.eventtypes import Event
from daemon.state.store import StateStore


def metrics_address(loaded: LoadedConfig, given: str) -> tuple[str, str]:
    """The address to serve on and how the person wrote it (for errors); ("", "") for none."""
    if given:
        return given, "loopd worker --metrics"
    listen = loaded.daemon.listen
    if listen is not None and listen.worker_bind:
        return listen.worker_bind, "loopd.toml: [listen] worker_bind"
    return "", ""


def start_metrics(
    loaded: LoadedConfig, given: str, store: StateStore, healthy: Callable[[], bool]
) -> Any:
    """The started listener, or None when no address is set; ConfigFatal when it cannot be."""
    bind, key = metrics_address(loaded, given)
    if not bind:
        return None
    for module in ("uvicorn", "prometheus_client"):
        try:
            __import__(module)
        except ImportError:
            raise ConfigFatal(
                f"{key} needs the Python package {module!r}, which is not installed; install "
                f"loopd's `listen` extra: {install_command('listen')}, or serve no /metrics"
            ) from None
    from daemon.config import ListenConfig
    from daemon.service.listener import Listener
    from daemon.service.metrics import Metrics

    def gauges() -> dict[str, float]:
        return {"running_runs": float(len(store.live_runs()))}

    metrics = Metrics(store, None, gauges, per_attempt=True)
    store.events.observers.append(metrics.observe)
    config = ListenConfig(bind=bind)
    listener = Listener(config, None, metrics, healthy, time.monotonic, key=key)
    listener.start()
    store.events.append(Event.LISTENING, bind=bind, port=listener.port)
    return listener
