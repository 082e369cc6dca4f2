"""What the listener's tests and bench share: a hosted repository stand-in, signed deliveries."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from daemon.scheduling.webhooks import sign
from tests.helpers import ROOT, events, git, make_repo

PAYLOADS = ROOT / "tests" / "data" / "webhooks"
SECRET = "It's a Secret to Everybody"  # GitHub's documented example secret
SECRET_ENV = "LOOPD_TEST_WEBHOOK_SECRET"
# The repositories the recorded payloads name.
REPOSITORIES = {
    "github": "Codertocat/Hello-World",
    "gitea": "gitea/webhooks",
    "gitlab": "mike/diaspora",
}
DELIVERY_HEADER = {
    "github": "X-GitHub-Delivery",
    "gitea": "X-Gitea-Delivery",
    "gitlab": "X-Gitlab-Event-UUID",
}
SIGNATURE_HEADER = {
    "github": "X-Hub-Signature-256",
    "gitea": "X-Gitea-Signature",
    "gitlab": "X-Gitlab-Token",
}


def hosted(tmp: Path) -> tuple[Path, Path, Path]:
    """A bare 'hosted' repository, a person's clone that pushes to it, and the loop's clone."""
    work = make_repo(tmp / "work", {"README.md": "hosted\n"})
    origin = tmp / "origin.git"
    git(tmp, "clone", "-q", "--bare", str(work), str(origin))
    git(work, "remote", "add", "origin", str(origin))
    loop_repo = tmp / "loop-repo"
    git(tmp, "clone", "-q", str(origin), str(loop_repo))
    return origin, work, loop_repo


def push_commit(work: Path, message: str, branch: str = "main") -> tuple[str, str]:
    """A new commit pushed to the hosted repository: (before, after)."""
    before = git(work, "rev-parse", "HEAD")
    git(work, "commit", "-q", "--allow-empty", "-m", message)
    git(work, "push", "-q", "origin", f"HEAD:refs/heads/{branch}")
    return before, git(work, "rev-parse", "HEAD")


def home_config(origin: Path, port: int = 0, rate_limit: int = 120, agent: str = "") -> str:
    """loopd.toml: [listen], a remote of each kind on `origin`, a quick command agent."""
    argv = agent or json.dumps([sys.executable, "-I", "-S", "-c", "pass"])
    text = (
        f'[listen]\nbind = "127.0.0.1:{port}"\nrate_limit = {rate_limit}\n\n'
        f'[agents.quick]\nadapter = "command"\ncommand = {argv}\n'
    )
    for kind, repository in REPOSITORIES.items():
        text += (
            f'\n[remotes.{kind}-r]\nkind = "{kind}"\nrepository = "{repository}"\n'
            f'clone_url = "file://{origin}"\nsecret_env = "{SECRET_ENV}"\n'
        )
    return text


def loop_file(repo: Path, remote: str, branches: str = '["main"]', extra: str = "") -> str:
    return (
        f'repo = "{repo}"\ntask = "Follow the hosted repository."\nagent = "quick"\n'
        f'hosted = "{remote}"\non_remote_push = {branches}\nmax_attempts = 1\n'
        f'max_nudges = 0\ncritic = "off"\nskip_if_done = false\n{extra}'
    )


def delivery(
    kind: str,
    ref: str,
    before: str,
    after: str,
    delivery_id: str | None = None,
    extra: dict[str, Any] | None = None,
) -> tuple[dict[str, str], bytes]:
    """The recorded delivery of `kind` for this push, signed with SECRET; `extra`: more keys
    in its body (a body sent twice is a replay, whatever its delivery id)."""
    recorded = json.loads((PAYLOADS / f"{kind}-push.json").read_text())
    body = recorded["body"]
    body.update(ref=ref, before=before, after=after, **(extra or {}))
    if kind == "gitlab":
        body["checkout_sha"] = after
    raw = json.dumps(body).encode()
    headers = dict(recorded["headers"])
    headers[DELIVERY_HEADER[kind]] = delivery_id or str(uuid.uuid4())
    headers[SIGNATURE_HEADER[kind]] = sign(kind, SECRET, raw)
    return headers, raw


def post(port: int, path: str, headers: dict[str, str], body: bytes) -> tuple[int, str]:
    """A real HTTP POST; the status and the text of the answer."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=body, headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def post_oversized(port: int, path: str, headers: dict[str, str], body: bytes) -> int:
    """A POST whose body the server may refuse before it is all sent: the status it answers."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest("POST", path)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            conn.putheader(name, value)
        conn.endheaders()
        try:
            conn.send(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused early: the answer is waiting
        return conn.getresponse().status
    finally:
        conn.close()


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def listening_port(home: Path) -> int:
    """The port the daemon's listener bound (its `listening` event), or 0 before it."""
    for event in events(home):
        if event["type"] == "listening":
            return int(event["port"])
    return 0


def of_type(home: Path, type_: str, **match: Any) -> list[dict]:
    return [
        e
        for e in events(home)
        if e["type"] == type_ and all(e.get(k) == v for k, v in match.items())
    ]


def require_module(name: str, extra: str) -> None:
    """Skip where an optional package is missing, except in CI (CI=true), where that fails."""
    import importlib.util
    import os

    import pytest

    if importlib.util.find_spec(name) is not None:
        return
    message = f"{name} is not installed (pip install -e '.[{extra}]'; .ci/run installs it)"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI=true: these tests must run)", pytrace=False)
    pytest.skip(message, allow_module_level=True)
