"""`[telemetry]`: an OpenTelemetry trace of each run, one span per phase, over OTLP/HTTP.

Built from what both engines write at the home: the run's record as it is saved (its phase:
preparing, running, judging, learning, waiting, landing; an outcome starts its finishing) and
its events (setup, the checks' result, the verdict, the end). So no step of a run needs a
hook of its own, and a run traced here looks the same on the local and the Temporal engine.
The trace: a root span `run`, under it `preparing`, `attempt` (one per attempt), `checks`,
`judging`, `learning`, `waiting`, `finishing`, with `setup` and `landing` inside the phase
they happen in. Every span carries `loopd.run.id`. opentelemetry is imported only here, and
only when `otlp_endpoint` is set.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import daemon as package
from daemon.config.telemetry import TelemetryConfig, missing_telemetry
from daemon.state.eventtypes import Event
from daemon.state.records import RunRecord
from daemon.state.store import StateStore

# The record's phase -> the span it opens (landing nests inside finishing, see `saved`).
PHASE_SPANS = {
    "preparing": "preparing",
    "running": "attempt",
    "judging": "checks",  # the checks come first; their event opens `judging`
    "learning": "learning",
    "waiting": "waiting",
}


@dataclass
class _Trace:
    """One run's open spans: the root, the current phase's, one nested in it."""

    run_id: str
    root: Any
    state: str = ""  # the record's phase last seen ("finishing" once it has an outcome)
    step: str = ""  # the name of the current phase's span
    span: Any = None
    nested: Any = None
    attempt: int = 0


class RunTracer:
    """Observes the store's run records and events; ends every open span at `close`."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("loopd")
        self.traces: dict[str, _Trace] = {}
        self._lock = threading.Lock()

    def attach(self, store: StateStore) -> None:
        store.run_observers.append(self.saved)
        store.events.observers.append(self.observe)

    # the record ------------------------------------------------------------------------------
    def saved(self, run: RunRecord) -> None:
        """A run's record saved: a new phase ends the last one's span and opens its own."""
        finishing = run.outcome is not None and run.phase != "landing"  # landing comes after
        state = "finishing" if finishing else run.phase
        with self._lock:
            trace = self.traces.get(run.id)
            if trace is None:
                if run.outcome is not None:
                    return  # finished before this process saw it (`loopd land` after the run)
                trace = self._open(run.id, run.loop, run.trigger.kind)
            if state == trace.state:
                return
            trace.attempt = run.attempts[-1].n if run.attempts else 0
            left_landing, trace.state = trace.state == "landing", state
            if state == "landing":
                self._nest(trace, "landing")
                return
            if left_landing:
                self._unnest(trace)
            name = "finishing" if state == "finishing" else PHASE_SPANS.get(state)
            if name is not None and name != trace.step:
                self._step(trace, name)

    # the events ------------------------------------------------------------------------------
    def observe(self, event: dict[str, Any]) -> None:
        """Steps within a phase (setup, the checks' result) and the run's end."""
        kind, run_id = event.get("type"), event.get("run")
        if not run_id:
            return
        with self._lock:
            trace = self.traces.get(run_id)
            if trace is None and kind == Event.RUN_STARTED:
                trace = self._open(run_id, event.get("loop") or "", str(event.get("trigger")))
            if trace is None:
                return
            if kind == Event.SETUP_STARTED:
                self._nest(trace, "setup", log=str(event.get("log") or ""))
            elif kind == Event.SETUP_FINISHED and trace.nested is not None:
                trace.nested.set_attribute("loopd.passed", bool(event.get("passed")))
                self._unnest(trace)
            elif kind == Event.CHECKS and trace.step == "checks":
                trace.span.set_attribute("loopd.passed", bool(event.get("passed")))
                self._step(trace, "judging")
            elif kind == Event.VERDICT and trace.span is not None:
                trace.span.set_attribute("loopd.passed", bool(event.get("passed")))
                trace.span.set_attribute("loopd.judged", bool(event.get("judged")))
            elif kind == Event.RUN_FINISHED:
                self._finish(self.traces.pop(run_id), event)

    # spans -----------------------------------------------------------------------------------
    def _open(self, run_id: str, loop: str, trigger: str) -> _Trace:
        root = self.tracer.start_span(
            "run",
            attributes={"loopd.run.id": run_id, "loopd.loop": loop, "loopd.trigger": trigger},
        )
        trace = self.traces[run_id] = _Trace(run_id=run_id, root=root)
        return trace

    def _child(self, trace: _Trace, parent: Any, name: str, **attributes: Any) -> Any:
        from opentelemetry import trace as api

        fields = {"loopd.run.id": trace.run_id, **attributes}
        if trace.attempt and name not in ("preparing", "finishing", "landing"):
            fields["loopd.attempt"] = trace.attempt
        return self.tracer.start_span(
            name, context=api.set_span_in_context(parent), attributes=fields
        )

    def _step(self, trace: _Trace, name: str) -> None:
        self._unnest(trace)
        if trace.span is not None:
            trace.span.end()
        trace.step, trace.span = name, self._child(trace, trace.root, name)

    def _nest(self, trace: _Trace, name: str, **attributes: Any) -> None:
        self._unnest(trace)
        parent = trace.span if trace.span is not None else trace.root
        trace.nested = self._child(trace, parent, name, **attributes)

    @staticmethod
    def _unnest(trace: _Trace) -> None:
        if trace.nested is not None:
            trace.nested.end()
            trace.nested = None

    def _finish(self, trace: _Trace, event: dict[str, Any]) -> None:
        from opentelemetry.trace import Status, StatusCode

        self._unnest(trace)
        if trace.span is not None:
            trace.span.end()
        outcome = str(event.get("outcome") or "")
        trace.root.set_attribute("loopd.outcome", outcome)
        trace.root.set_attribute("loopd.cause", str(event.get("cause") or ""))
        if isinstance(event.get("tokens"), int):
            trace.root.set_attribute("loopd.tokens", event["tokens"])
        if outcome == "error":
            trace.root.set_status(Status(StatusCode.ERROR, str(event.get("reason") or "")[:500]))
        trace.root.end()

    def close(self) -> None:
        """End what is open (a run this process stops in the middle of) and send the rest."""
        with self._lock:
            for trace in self.traces.values():
                trace.root.set_attribute("loopd.stopped", True)
                self._unnest(trace)
                if trace.span is not None:
                    trace.span.end()
                trace.root.end()
            self.traces.clear()
        self.provider.shutdown()


def start_tracing(config: TelemetryConfig, store: StateStore) -> RunTracer | None:
    """A tracer following `store`, when `otlp_endpoint` is set and the packages are there."""
    if not config.otlp_endpoint or missing_telemetry():
        return None  # a missing package is `check`'s and the start's warning (preflight)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create(
        {"service.name": config.service_name, "service.version": package.__version__}
    )
    # Not the global provider: loopd's spans go where loopd.toml says, whatever else runs.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    exporter = OTLPSpanExporter(endpoint=config.traces_url, timeout=10)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = RunTracer(provider)
    tracer.attach(store)
    return tracer
