"""webhooks.py: each service's signature, headers, repository and push, as its docs show them.

The signatures are checked against HMAC-SHA256 computed here by hashlib itself (the value
GitHub's and Gitea's docs describe), never against `sign`, which the desk also uses.
"""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from daemon.scheduling.webhooks import (
    DELIVERY,
    EVENT,
    SIGNATURE,
    ZERO,
    header,
    parse,
    push_of,
    repository_of,
    sign,
    verified,
)

BODY = b'{"ref": "refs/heads/main", "repository": {"full_name": "me/app"}}'
SECRET = "s3cret-for-the-hook"
HEX = hmac.new(SECRET.encode(), BODY, hashlib.sha256).hexdigest()


def test_each_service_signs_as_its_docs_say() -> None:
    assert sign("github", SECRET, BODY) == f"sha256={HEX}"
    assert sign("gitea", SECRET, BODY) == HEX  # the bare hex digest
    assert sign("gitlab", SECRET, BODY) == SECRET  # the token itself, no signature
    assert len(HEX) == 64 and ZERO == "0" * 40


@pytest.mark.parametrize("kind", ["github", "gitea", "gitlab"])
def test_the_right_signature_verifies_and_any_other_does_not(kind: str) -> None:
    good = sign(kind, SECRET, BODY)
    assert verified(kind, SECRET, good, BODY)
    assert verified(kind, SECRET, f"  {good}\n", BODY)  # a header's surrounding blanks
    # GitLab's token is the secret itself: it says nothing of the body.
    assert verified(kind, SECRET, good, BODY + b" ") is (kind == "gitlab")
    assert not verified(kind, "another secret", good, BODY)
    assert not verified(kind, SECRET, "", BODY)
    assert not verified(kind, SECRET, good[:-1], BODY)


@pytest.mark.parametrize("kind", ["github", "gitea", "gitlab"])
def test_an_empty_secret_verifies_nothing(kind: str) -> None:
    """A remote whose secret_env is unset or empty: whoever signs with the empty key (anyone
    can) must not pass, nor a GitLab token that is empty too."""
    assert not verified(kind, "", sign(kind, "", BODY), BODY)
    assert not verified(kind, "", "sha256=", BODY)


def test_the_first_header_of_a_kind_present_is_taken() -> None:
    gitea = {"x-forgejo-signature": "f", "x-forgejo-event": "push", "x-forgejo-delivery": "d"}
    assert header(gitea, "gitea", SIGNATURE) == "f"
    assert header(gitea, "gitea", EVENT) == "push"
    assert header(gitea, "gitea", DELIVERY) == "d"
    both = {"x-gitea-signature": "g", "x-forgejo-signature": "f"}
    assert header(both, "gitea", SIGNATURE) == "g"
    # An empty header counts as absent: the next name is read.
    assert header({"x-gitea-signature": "", "x-forgejo-signature": "f"}, "gitea", SIGNATURE) == (
        "f"
    )
    gitlab = {"x-gitlab-event-uuid": "u", "idempotency-key": "k"}
    assert header(gitlab, "gitlab", DELIVERY) == "k"
    assert header({"x-gitlab-event-uuid": "u"}, "gitlab", DELIVERY) == "u"
    assert header({"x-github-event": "push"}, "github", DELIVERY) == ""
    assert header({"X-GitHub-Delivery": "d"}, "github", DELIVERY) == ""  # lower-cased only


def test_the_repository_a_delivery_names() -> None:
    assert repository_of("github", {"repository": {"full_name": "me/app"}}) == "me/app"
    assert repository_of("gitea", {"repository": {"full_name": "org/x"}}) == "org/x"
    gitlab = {"project": {"path_with_namespace": "grp/sub/app"}, "repository": {}}
    assert repository_of("gitlab", gitlab) == "grp/sub/app"
    # GitLab's payload is read from `project`, the others' from `repository` only.
    assert repository_of("gitlab", {"repository": {"full_name": "me/app"}}) == ""
    assert repository_of("github", {"project": {"path_with_namespace": "me/app"}}) == ""
    for hostile in ([], "me/app", {"repository": "me/app"}, {"repository": {"full_name": 3}}):
        assert repository_of("github", hostile) == ""
    assert repository_of("gitlab", {"project": ["me/app"]}) == ""
    assert repository_of("gitlab", {"project": {"path_with_namespace": None}}) == ""


def test_parse_reads_json_and_its_repository() -> None:
    assert parse("github", BODY) == (json.loads(BODY), "me/app")
    assert parse("github", b"[1, 2]") == ([1, 2], "")
    with pytest.raises(ValueError):
        parse("github", b"not json")


def test_the_push_a_payload_describes() -> None:
    payload = {
        "ref": "refs/heads/main",
        "before": "a" * 40,
        "after": "b" * 40,
        "repository": {"full_name": "me/app"},
    }
    push = push_of("github", payload)
    assert (push.repository, push.ref, push.before, push.after) == (
        "me/app",
        "refs/heads/main",
        "a" * 40,
        "b" * 40,
    )
    gitlab = push_of("gitlab", {"ref": "refs/heads/x", "project": {"path_with_namespace": "g/a"}})
    assert (gitlab.repository, gitlab.ref) == ("g/a", "refs/heads/x")
    odd = push_of("gitea", {"ref": 7, "before": None, "after": ["x"]})
    assert (odd.repository, odd.ref, odd.before, odd.after) == ("", "", "", "")
