"""The run tracer on a real store: records saved and events written, spans kept in memory."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from daemon.state.records import AttemptRecord, RunRecord, RunTrigger
from daemon.state.store import StateStore

pytest.importorskip("opentelemetry.sdk.trace", reason="needs loopd's telemetry extra")

NOW = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)


@pytest.fixture
def traced(tmp_path: Path) -> tuple[StateStore, Any, Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from daemon.service.tracing import RunTracer

    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    store = StateStore(tmp_path / "state")
    tracer = RunTracer(provider)
    tracer.attach(store)
    return store, tracer, exporter


def _run(run_id: str = "20261202T030000Z-app-0001", **fields: Any) -> RunRecord:
    return RunRecord(
        id=run_id,
        loop="app",
        task="t",
        trigger=RunTrigger(kind="manual"),
        started=NOW,
        **fields,
    )


def _names(exporter: Any) -> list[str]:
    return [span.name for span in exporter.get_finished_spans()]


def test_a_run_resumed_after_a_restart_is_traced_from_where_it_is(traced) -> None:  # noqa: ANN001
    store, tracer, exporter = traced
    run = _run(phase="judging", attempts=[AttemptRecord(n=2, started=NOW)])
    store.save_run(run)
    store.events.append("checks", NOW, loop="app", run=run.id, attempt=2, passed=False, results=[])
    run.outcome, run.phase = "escalated", "idle"
    store.save_run(run)
    store.events.append(
        "run_finished", NOW, loop="app", run=run.id, outcome="escalated", reason="attempts used up"
    )
    assert _names(exporter) == ["checks", "judging", "finishing", "run"]
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert spans["checks"].attributes["loopd.attempt"] == 2
    assert spans["run"].attributes["loopd.outcome"] == "escalated"
    assert not tracer.traces


def test_a_landing_after_the_run_ended_opens_no_trace(traced) -> None:  # noqa: ANN001
    """`loopd land RUN` saves a finished run's record through `landing`: not a new run."""
    store, tracer, exporter = traced
    run = _run(outcome="succeeded", phase="landing")
    store.save_run(run)
    run.phase = "idle"
    store.save_run(run)
    assert not tracer.traces and _names(exporter) == []


def test_close_ends_what_a_stop_left_open(traced) -> None:  # noqa: ANN001
    store, tracer, exporter = traced
    run = _run(phase="preparing")
    store.save_run(run)
    store.events.append("setup_started", NOW, loop="app", run=run.id, log="setup.log", commands=1)
    tracer.close()
    assert _names(exporter) == ["setup", "preparing", "run"]
    root = exporter.get_finished_spans()[-1]
    assert root.attributes["loopd.stopped"] is True
    assert all(s.attributes["loopd.run.id"] == run.id for s in exporter.get_finished_spans())


def test_other_runs_and_events_without_a_run_are_left_alone(traced) -> None:  # noqa: ANN001
    store, tracer, exporter = traced
    store.events.append("daemon_started", NOW, pid=1, version="test")
    store.events.append(
        "checks", NOW, loop="app", run="unknown", attempt=1, passed=True, results=[]
    )
    assert not tracer.traces and _names(exporter) == []
