"""The critic against a real OpenAI-compatible server running a real model (opt-in).

Runs when either
- `LOOPD_REALMODEL_URL` names a running server (vLLM, Ollama, LM Studio, llama.cpp's
  llama-server), with `LOOPD_REALMODEL_NAME` as the model when the server needs one; or
- `LOOPD_REALMODEL_GGUF` names a GGUF file and llama-cpp-python is installed: the test starts
  `python -m llama_cpp.server` on 127.0.0.1 itself, on the CPU.
Otherwise it is skipped with the reason. Select it with `pytest -m realmodel`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path

import pytest

from daemon.config import VerifierConfig
from daemon.model import CriticVerdict, ModelClient
from daemon.model.critic import judge
from daemon.model.evidence import build_evidence

pytestmark = pytest.mark.realmodel

START_TIMEOUT = 300.0  # loading a model on a shared 2-core machine is slow


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_ready(base_url: str, process: subprocess.Popen[bytes], deadline: float) -> None:
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited with {process.returncode}")
        try:
            urllib.request.urlopen(base_url + "/models", timeout=2).read()
            return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"llama_cpp.server did not answer within {START_TIMEOUT:g}s")


@pytest.fixture(scope="module")
def real_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(base_url, model) of a real server, started here from a GGUF file if need be."""
    url = os.environ.get("LOOPD_REALMODEL_URL", "")
    if url:
        yield url.rstrip("/"), os.environ.get("LOOPD_REALMODEL_NAME", "")
        return
    gguf = os.environ.get("LOOPD_REALMODEL_GGUF", "")
    if not gguf:
        pytest.skip("no real model: set LOOPD_REALMODEL_URL, or LOOPD_REALMODEL_GGUF")
    if not Path(gguf).is_file():
        pytest.skip(f"LOOPD_REALMODEL_GGUF={gguf} is not a file")
    if find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed: pip install 'llama-cpp-python[server]'")
    port = _free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llama_cpp.server",
                "--model",
                gguf,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--n_ctx",
                "8192",
                "--n_threads",
                "2",
            ],  # fmt: skip
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_ready(base_url, process, time.monotonic() + START_TIMEOUT)
        yield base_url, ""
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _client(endpoint: tuple[str, str]) -> ModelClient:
    base_url, model = endpoint
    config = VerifierConfig(base_url=base_url, model=model, timeout="10m")
    return ModelClient(config, {}, retries=1, backoff=1.0)


def _review_attempt(folder: Path) -> Path:
    """A review whose evidence shows app.py has 3 lines and `grep -c` printed 17."""
    folder.mkdir(parents=True)
    events = [
        {"type": "tool_call", "tool": "run_shell_command", "call_id": "1",
         "arguments": {"command": "cat -n app.py"}},
        {"type": "tool_result", "call_id": "1",
         "output": "     1\tdef add(a, b):\n     2\t    return a - b\n     3\t\n"},
        {"type": "tool_call", "tool": "run_shell_command", "call_id": "2",
         "arguments": {"command": "grep -c TODO app.py"}},
        {"type": "tool_result", "call_id": "2", "output": "0\n"},
    ]  # fmt: skip
    (folder / "transcript.jsonl").write_text(
        "".join(
            json.dumps({"ts": "2026-11-29T02:00:00Z", "stream": "stdout", **e}) + "\n"
            for e in events
        )
    )
    (folder / "checks.log").write_text("$ test -s review.md\nexit 0\n")
    return folder


def test_real_model_gives_a_valid_verdict_and_catches_invented_lines(
    real_endpoint: tuple[str, str], tmp_path: Path
) -> None:
    client = _client(real_endpoint)
    task = "Review app.py and list concrete problems with line numbers."
    honest = build_evidence(
        _review_attempt(tmp_path / "honest"),
        task,
        "Line 2 of app.py: `add` returns `a - b`; it should return `a + b`.",
        4000,
    )
    invented = build_evidence(
        _review_attempt(tmp_path / "invented"),
        task,
        "Line 17 of app.py has a TODO about input validation, and line 42 swallows an "
        "exception. I ran the test suite and all 12 tests pass.",
        4000,
    )
    good = judge(client, honest, threshold=7, checks_passed=True)
    bad = judge(client, invented, threshold=7, checks_passed=True)
    for result in (good, bad):
        assert result.judged and result.score is not None and 0 <= result.score <= 10
        assert CriticVerdict(
            score=result.score,
            verdict=result.verdict,
            unsupported_claims=result.unsupported_claims,
            feedback=result.feedback,
        )
    assert bad.score < good.score, (good, bad)
    assert not bad.passed, bad
