"""A hosting service's push webhook: who signed it, what it says, as pure functions.

- GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>`, `X-GitHub-Event`,
  `X-GitHub-Delivery`; the repository is `repository.full_name`.
- Gitea and Forgejo: `X-Gitea-Signature` (Forgejo also `X-Forgejo-Signature`): the bare hex
  HMAC-SHA256 of the body; `X-Gitea-Event`, `X-Gitea-Delivery`; `repository.full_name`.
- GitLab: `X-Gitlab-Token` is the secret itself (no signature over the body);
  `X-Gitlab-Event: Push Hook`, `X-Gitlab-Event-UUID` (newer: `Idempotency-Key`);
  the repository is `project.path_with_namespace`.

Every comparison is constant-time (hmac.compare_digest).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

ZERO = "0" * 40
# Header names as sent (lower-cased by the server).
SIGNATURE = {
    "github": ("x-hub-signature-256",),
    "gitea": ("x-gitea-signature", "x-forgejo-signature"),
    "gitlab": ("x-gitlab-token",),
}
EVENT = {
    "github": ("x-github-event",),
    "gitea": ("x-gitea-event", "x-forgejo-event"),
    "gitlab": ("x-gitlab-event",),
}
DELIVERY = {
    "github": ("x-github-delivery",),
    "gitea": ("x-gitea-delivery", "x-forgejo-delivery"),
    "gitlab": ("idempotency-key", "x-gitlab-event-uuid"),
}
PUSH_EVENTS = {"github": "push", "gitea": "push", "gitlab": "Push Hook"}


class Push(BaseModel):
    """What loopd takes from a push delivery."""

    repository: str
    ref: str = ""
    before: str = ""
    after: str = ""


def header(headers: Mapping[str, str], kind: str, table: dict[str, tuple[str, ...]]) -> str:
    """The first of a kind's header names present."""
    for name in table[kind]:
        if headers.get(name):
            return headers[name]
    return ""


def sign(kind: str, secret: str, body: bytes) -> str:
    """The header value a sender computes: for tests, the bench and the docs."""
    if kind == "gitlab":
        return secret
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return f"sha256={digest}" if kind == "github" else digest


def verified(kind: str, secret: str, given: str, body: bytes) -> bool:
    """Whether `given` (the signature header) is right for `body` under `secret`."""
    if not secret or not given:
        return False
    return hmac.compare_digest(given.strip().encode(), sign(kind, secret, body).encode())


def repository_of(kind: str, payload: Any) -> str:
    """The repository a delivery names, as `[remotes.NAME] repository` writes it."""
    if not isinstance(payload, dict):
        return ""
    if kind == "gitlab":
        project = payload.get("project")
        name = project.get("path_with_namespace") if isinstance(project, dict) else None
    else:
        repo = payload.get("repository")
        name = repo.get("full_name") if isinstance(repo, dict) else None
    return name if isinstance(name, str) else ""


def parse(kind: str, body: bytes) -> tuple[Any, str]:
    """The JSON body and the repository it names; ValueError when it is not JSON."""
    payload = json.loads(body)
    return payload, repository_of(kind, payload)


def push_of(kind: str, payload: dict[str, Any]) -> Push:
    """The push a verified payload describes."""

    def text(key: str) -> str:
        value = payload.get(key)
        return value if isinstance(value, str) else ""

    return Push(
        repository=repository_of(kind, payload),
        ref=text("ref"),
        before=text("before"),
        after=text("after"),
    )
