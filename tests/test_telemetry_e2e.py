"""[telemetry] end to end: a real run's spans, sent over OTLP/HTTP to a collector in the test.

The collector is a plain HTTP server taking POST /v1/traces and decoding each body with
opentelemetry-proto's own messages; the run is a real `loopd once` or `loopd run` with a
`command` agent that fixes the repository.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from daemon.extras import install_command
from tests.helpers import loopd, make_home, make_repo, runs, start_daemon, stop_daemon, wait_for

pytest.importorskip("opentelemetry.sdk.trace", reason="needs loopd's telemetry extra")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")

CALC = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5\n",
}
FIX = (
    "import pathlib\n"
    "p = pathlib.Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
)


class Collector(ThreadingHTTPServer):
    """Spans received, as dicts: name, ids, attributes."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spans: list[dict[str, Any]] = []
        self.paths: list[str] = []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.server.paths.append(self.path)
        for resource in request.resource_spans:
            service = {a.key: a.value.string_value for a in resource.resource.attributes}
            for scope in resource.scope_spans:
                for span in scope.spans:
                    self.server.spans.append(_span(span, service))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def _span(span: Any, service: dict[str, str]) -> dict[str, Any]:
    attributes = {}
    for item in span.attributes:
        value = item.value
        attributes[item.key] = getattr(value, value.WhichOneof("value"))
    return {
        "name": span.name,
        "trace": span.trace_id.hex(),
        "id": span.span_id.hex(),
        "parent": span.parent_span_id.hex(),
        "start": span.start_time_unix_nano,
        "end": span.end_time_unix_nano,
        "attributes": attributes,
        "service": service.get("service.name"),
    }


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _home(tmp_path: Path, telemetry: str) -> Path:
    repo = make_repo(tmp_path / "repo", CALC)
    argv = json.dumps([sys.executable, "-c", FIX])
    loop = (
        f'repo = "{repo}"\ntask = "Make check.py pass."\nagent = "bot"\n'
        'done_when = ["python3 check.py"]\nsetup = ["true"]\ncritic = "off"\n'
        'land = "merge"\nmax_attempts = 1\n'
    )
    config = f'[agents.bot]\nadapter = "command"\ncommand = {argv}\n\n{telemetry}'
    return make_home(tmp_path / "home", config, {"calc": loop})


@pytest.mark.parametrize("how", ["once", "daemon"])
def test_a_run_is_one_trace_with_a_span_per_phase(
    tmp_path: Path, collector: Collector, how: str
) -> None:
    telemetry = f'[telemetry]\notlp_endpoint = "{collector.endpoint}"\nservice_name = "nightly"\n'
    home = _home(tmp_path, telemetry)
    if how == "once":
        proc = loopd(home, "once", "calc", timeout=120)
        assert proc.returncode == 0, proc.stderr
    else:
        daemon = start_daemon(home)
        try:
            assert loopd(home, "trigger", "calc").returncode == 0
            wait_for(lambda: [r for r in runs(home) if r.get("outcome")], timeout=120)
        finally:
            assert stop_daemon(daemon) == 0  # the last spans are sent as it stops
    (run,) = runs(home)
    assert run["outcome"] == "succeeded" and run["landed"], run
    spans = wait_for(lambda: collector.spans, what="the spans")
    assert set(collector.paths) == {"/v1/traces"}
    assert {s["service"] for s in spans} == {"nightly"}
    assert {s["trace"] for s in spans} == {spans[0]["trace"]}  # one trace
    assert all(s["attributes"]["loopd.run.id"] == run["id"] for s in spans)
    (root,) = [s for s in spans if s["name"] == "run"]
    assert root["parent"] == "" and root["attributes"]["loopd.loop"] == "calc"
    assert root["attributes"]["loopd.trigger"] == "manual"
    assert root["attributes"]["loopd.outcome"] == "succeeded"
    by_name = {s["name"]: s for s in spans}
    phases = ["preparing", "attempt", "checks", "judging", "finishing"]
    assert set(phases) | {"setup", "landing"} <= set(by_name), sorted(by_name)
    # The phases follow one another under the root, within it.
    for earlier, later in zip(phases, phases[1:], strict=False):
        assert by_name[earlier]["end"] <= by_name[later]["start"], (earlier, later)
    for name in phases:
        assert by_name[name]["parent"] == root["id"], name
        assert root["start"] <= by_name[name]["start"] <= by_name[name]["end"] <= root["end"]
    assert by_name["attempt"]["attributes"]["loopd.attempt"] == 1
    assert by_name["checks"]["attributes"]["loopd.passed"] is True
    # setup inside the preparing (the run's tree; the clean check tree's too), landing inside
    # the finishing.
    setups = [s for s in spans if s["name"] == "setup"]
    assert by_name["preparing"]["id"] in {s["parent"] for s in setups}
    assert by_name["landing"]["parent"] == by_name["finishing"]["id"]


def test_without_the_packages_check_warns_and_the_run_goes_on(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    (shadow / "opentelemetry").mkdir(parents=True)
    (shadow / "opentelemetry" / "__init__.py").write_text("raise ImportError('hidden')\n")
    env = {"PYTHONPATH": f"{shadow}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    home = _home(tmp_path, '[telemetry]\notlp_endpoint = "http://127.0.0.1:9"\n')
    checked = loopd(home, "check", env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    said = checked.stdout + checked.stderr
    assert install_command("telemetry") in said and "otlp_endpoint" in said
    proc = loopd(home, "once", "calc", env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert install_command("telemetry") in proc.stderr and "Traceback" not in proc.stderr
    assert runs(home)[0]["outcome"] == "succeeded"


def test_the_temporal_home_traces_the_runs_its_workers_attempt(
    tmp_path: Path, collector: Collector, temporal: Any
) -> None:
    from tests.machines import BUGGY, command_agent, make_cluster
    from tests.test_temporal_engine import FIX as TEMPORAL_FIX
    from tests.test_temporal_engine import LOOP, finished

    server, namespace = temporal
    agents = command_agent("a", "import pathlib\n" + TEMPORAL_FIX)
    config = f'[telemetry]\notlp_endpoint = "{collector.endpoint}"\n'
    cluster = make_cluster(
        tmp_path, server.address, namespace, BUGGY, agents, LOOP, workers=1, config=config
    )
    home, worker = cluster.home, cluster.workers[0]
    try:
        home.start("run")
        worker.start("worker", "--queue", "gpu")
        assert home.loopd("trigger", "calc").returncode == 0
        (run,) = wait_for(lambda: finished(home, 1), timeout=90, what="the run")
        assert run["outcome"] == "succeeded", run
        assert home.stop() == 0  # the last spans are sent as it stops
    finally:
        cluster.stop()
    spans = wait_for(lambda: collector.spans, what="the spans")
    assert all(s["attributes"]["loopd.run.id"] == run["id"] for s in spans)
    (root,) = [s for s in spans if s["name"] == "run"]
    phases = ["preparing", "attempt", "checks", "judging", "finishing"]
    steps = sorted((s for s in spans if s["parent"] == root["id"]), key=lambda s: s["start"])
    # As on the local engine, though the attempt and its checks ran on the worker.
    assert [s["name"] for s in steps if s["name"] in phases] == phases
