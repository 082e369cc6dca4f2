"""`[telemetry]` of loopd.toml: OpenTelemetry traces of runs, sent over OTLP/HTTP."""

from __future__ import annotations

import importlib.util

from pydantic import Field, field_validator

from daemon.config.base import StrictModel, _http_url
from daemon.extras import install_command

# The Python packages `otlp_endpoint` needs; loopd's `telemetry` extra installs them.
TELEMETRY_MODULES = (
    ("opentelemetry.sdk.trace", "opentelemetry-sdk"),
    (
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "opentelemetry-exporter-otlp-proto-http",
    ),
)


class TelemetryConfig(StrictModel):
    """`[telemetry]`: traces are off until `otlp_endpoint` is set."""

    otlp_endpoint: str = Field(
        "",
        description=(
            "the collector's OTLP/HTTP address, as `OTEL_EXPORTER_OTLP_ENDPOINT` reads it: "
            "spans are POSTed to its `/v1/traces` (a URL already ending so is taken as it is)"
        ),
        examples=["http://127.0.0.1:4318"],
        json_schema_extra={"allowed": "an `http://` or `https://` URL, or empty (off)"},
    )
    service_name: str = Field(
        "loopd",
        min_length=1,
        max_length=200,
        description="the traces' `service.name`",
        json_schema_extra={"allowed": "1 to 200 characters"},
    )

    _endpoint = field_validator("otlp_endpoint")(_http_url)

    @property
    def traces_url(self) -> str:
        """Where spans are POSTed: the endpoint as OTEL_EXPORTER_OTLP_ENDPOINT reads it."""
        base = self.otlp_endpoint.rstrip("/")
        return base if base.endswith("/v1/traces") else f"{base}/v1/traces"


def missing_telemetry() -> str:
    """The first package traces need that is not installed, or ""."""

    for module, package in TELEMETRY_MODULES:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package that is missing or broken
            found = False
        if not found:
            return package
    return ""


def telemetry_warnings(telemetry: TelemetryConfig) -> list[str]:
    """Traces asked for without the packages that send them: nothing breaks, none is sent."""
    missing = missing_telemetry() if telemetry.otlp_endpoint else ""
    if not missing:
        return []
    return [
        f"loopd.toml: [telemetry] otlp_endpoint is set but the Python package {missing!r} is "
        f"not installed, so no trace is sent. Fix: {install_command('telemetry')}, or remove "
        "otlp_endpoint"
    ]
