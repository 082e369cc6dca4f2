"""`loopd worker`'s /metrics on a real Temporal dev server: real HTTP, prometheus_client's parser.

The worker counts the attempts it ran from its own event log, with the daemon's metric names.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from tests.helpers import loopd, make_home, wait_for
from tests.listening import get, listening_port, require_module
from tests.machines import BUGGY, command_agent, engine_toml, make_cluster
from tests.test_temporal_engine import FIX, LOOP, finished

require_module("uvicorn", "listen")
require_module("prometheus_client", "listen")


def test_a_worker_serves_metrics_of_the_attempts_it_ran(tmp_path: Path, temporal: Any) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    server, namespace = temporal
    agents = command_agent("a", "import pathlib\n" + FIX)
    config = '[listen]\nworker_bind = "127.0.0.1:0"\n'
    cluster = make_cluster(
        tmp_path, server.address, namespace, BUGGY, agents, LOOP, workers=1, config=config
    )
    home, worker = cluster.home, cluster.workers[0]
    try:
        home.start("run")
        worker.start("worker", "--queue", "gpu")
        port = wait_for(lambda: listening_port(worker.home), what="the worker's listener")
        assert get(port, "/healthz") == (200, "ok\n")
        assert get(port, "/hooks/github")[0] == 404  # webhooks are the home's business
        assert home.loopd("trigger", "calc").returncode == 0
        (run,) = wait_for(lambda: finished(home, 1), timeout=90, what="the run")
        assert run["outcome"] == "succeeded", run
        wait_for(lambda: worker.events("attempt_finished"), what="the worker's attempt")
        status, text = get(port, "/metrics")
        assert status == 200
        families = {f.name: f for f in text_string_to_metric_families(text)}

        def samples(name: str, suffix: str = "_total") -> dict[tuple[str, ...], float]:
            return {
                tuple(sorted(s.labels.values())): s.value
                for s in families[name].samples
                if s.name.endswith(suffix)
            }

        started = worker.events("attempt_started")
        assert len(started) == 1 and started[0]["run"] == run["id"]
        assert samples("loopd_attempts") == {("calc",): 1}
        assert samples("loopd_tokens") == {("calc",): run["tokens"]}
        assert samples("loopd_cost_usd") == {("calc",): 0}  # the command agent costs nothing
        assert samples("loopd_nudges") == {}
        latency = samples("loopd_trigger_to_start_seconds", "_count")
        assert latency == {(run["trigger"]["kind"],): 1}
        assert families["loopd_running_runs"].samples[0].value == 0
        # What only the home knows is not guessed at here.
        assert "loopd_runs" not in families and "loopd_rules" not in families
        # The home shares the [listen] table but serves no listener on the Temporal engine.
        assert not home.events("listening")
        checked = home.loopd("check")
        assert "listen: [listen]" not in checked.stdout + checked.stderr
    finally:
        cluster.stop()


def test_a_taken_metrics_port_stops_the_worker_with_a_clear_error(tmp_path: Path) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    try:
        port = holder.getsockname()[1]
        # No engine runs at this address: the port is taken before the engine is reached.
        home = make_home(tmp_path / "home", engine_toml("127.0.0.1:9", "default"))
        proc = loopd(home, "worker", "--metrics", f"127.0.0.1:{port}", timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert f"loopd worker --metrics = '127.0.0.1:{port}': cannot listen there" in proc.stderr
        assert "Traceback" not in proc.stderr
        bad = loopd(home, "worker", "--metrics", "nowhere", timeout=60)
        assert bad.returncode == 2 and "is not HOST:PORT" in bad.stderr
    finally:
        holder.close()
