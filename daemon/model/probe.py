"""Trying the verifier before the night: does `[verifier] base_url` answer `/models`, and does
it list `[verifier] model`? `loopd check`, the daemon's start and `loopd verifier --test` ask."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping

from pydantic import BaseModel, ValidationError

from daemon.config.home_file import VerifierConfig

PROBE_TIMEOUT = 5.0


class _ModelEntry(BaseModel):
    id: str


class _ModelList(BaseModel):
    data: list[_ModelEntry]


class Probe(BaseModel):
    """What trying the verifier found: `ok`, the models listed, and what to do when not ok."""

    ok: bool
    models: list[str] = []
    text: str


def probe_verifier(
    config: VerifierConfig,
    config_path: str,
    environ: Mapping[str, str] = os.environ,
    timeout: float = PROBE_TIMEOUT,
) -> Probe:
    """Ask `base_url`/models once (no retries); say what answered or what to fix."""
    url = config.base_url.rstrip("/") + "/models"
    where = f"{config_path}: [verifier] base_url {config.base_url}"
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    key = environ.get(config.api_key_env, "") if config.api_key_env else ""
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:  # noqa: S310 - http(s) only
            body = reply.read(1_000_000)
    except urllib.error.HTTPError as exc:
        fix = {
            401: f"the server wants a key: set api_key_env to the variable that holds it "
            f"(now {config.api_key_env or 'unset'})",
            403: f"the key in ${config.api_key_env or '(api_key_env unset)'} is refused",
            404: "no /models there: base_url usually ends in /v1, e.g. http://127.0.0.1:8000/v1",
        }.get(exc.code, "check that the server there is an OpenAI-compatible endpoint")
        return Probe(ok=False, text=f"{where}: GET {url} answered HTTP {exc.code}. Fix: {fix}")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        why = getattr(exc, "reason", exc)
        return Probe(
            ok=False,
            text=f"{where} does not answer ({why}). Fix: start the model server, or correct "
            "base_url in loopd.toml; attempts are judged by their checks alone until it answers",
        )
    try:
        models = [m.id for m in _ModelList.model_validate(json.loads(body)).data]
    except (ValueError, ValidationError):
        return Probe(
            ok=False,
            text=f"{where}: GET {url} did not answer a model list. Fix: point base_url at an "
            "OpenAI-compatible endpoint (ending in /v1)",
        )
    listed = ", ".join(models[:8]) or "none"
    if config.model and config.model not in models:
        return Probe(
            ok=False,
            models=models,
            text=f"{config_path}: [verifier] model {config.model!r} is not among the models "
            f"{config.base_url} lists ({listed}). Fix: set model to one of them",
        )
    model = config.model or (models[0] if models else "")
    if not model:
        return Probe(
            ok=False,
            text=f"{where} lists no model. Fix: load a model in the server, or set [verifier] "
            "model",
        )
    return Probe(ok=True, models=models, text=f"verifier {config.base_url} answers; model {model}")
