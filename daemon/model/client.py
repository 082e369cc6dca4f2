"""The verifier endpoint client: structured replies, format fallback, repair, retries.

Retries are this module's own (one `RetryPolicy`); the openai package's are off
(`max_retries=0`), so a server's `Retry-After` is honoured in one place.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from daemon.clock import utc_now
from daemon.config import VerifierConfig
from daemon.model.schemas import strict_schema
from daemon.redact import redact
from daemon.retry import MODEL_REQUEST, RetryPolicy, retry_after_of

if TYPE_CHECKING:
    from openai import OpenAI

T = TypeVar("T", bound=BaseModel)

# Keyless local servers accept any key; the openai package insists on one.
PLACEHOLDER_KEY = "loopd-no-key"
# What a server may accept, best first; the client steps down when one is rejected and
# remembers what was accepted.
FORMATS = ("json_schema", "json_object", "none")
# How servers word a rejected response_format, whatever the status: llama-cpp-python answers
# json_schema with HTTP 500 "Input should be 'text' or 'json_object'".
_FORMAT_REJECTED = re.compile(r"response_format|json_schema|json_object|json schema", re.I)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


class ModelUnavailable(Exception):
    """The endpoint is unreachable, timing out, or still answering invalid replies.

    `retry_after` is the pause (seconds) the server asked for, when it asked for one.
    """

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class InvalidReply(ModelUnavailable):
    """The endpoint answered, but not with a valid reply, even after one repair."""


class _Malformed(Exception):
    """A 200 answer that is not the JSON asked for (a proxy's error page, say)."""


class ModelClient:
    """An OpenAI-compatible endpoint from `[verifier]`, asked for validated structured replies."""

    def __init__(
        self,
        config: VerifierConfig,
        environ: Mapping[str, str] = os.environ,
        *,
        retry: RetryPolicy = MODEL_REQUEST,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self.config = config
        self.api_key = (environ.get(config.api_key_env, "") if config.api_key_env else "") or (
            PLACEHOLDER_KEY
        )
        self.retry = retry  # how one request is retried after a transient failure
        self.sleep = sleep
        self.format = FORMATS[0]  # what the server accepted last
        self.calls = 0  # structured() and embeddings() calls, whatever their result
        self.requests = 0  # HTTP requests sent, retries and repairs included
        self.tokens = 0  # total tokens of the chat answers, as the server reported them
        self._model = config.model
        self._openai: OpenAI | None = None
        self._lock = threading.Lock()

    # -- public calls -----------------------------------------------------------

    def structured(
        self,
        name: str,
        reply: type[T],
        system: str,
        user: str,
        *,
        timeout: float | None = None,
    ) -> T:
        """Ask for the reply `name`, validated as `reply`; raise ModelUnavailable when it fails.

        `timeout` bounds the whole call (retries and the repair included); without it each
        request is bounded by `[verifier] timeout`.
        """
        self.calls += 1
        # The client's setup (the openai package's first import takes a second or more on a
        # busy machine) is loopd's own work: the deadline bounds the model's answer only.
        self._client()
        deadline = None if timeout is None else time.monotonic() + timeout
        schema = _schema_of(reply)
        messages: list[dict[str, str]] = [
            {"role": "system", "content": redact(_with_schema(system, name, schema))},
            {"role": "user", "content": redact(user)},
        ]
        content = self._complete(name, schema, messages, deadline)
        try:
            return _parse(reply, content)
        except (ValidationError, ValueError) as first:
            problem = _problem(first)
        # One repair: the model sees its own reply and what was wrong with it.
        messages += [
            {"role": "assistant", "content": redact(content)},
            {
                "role": "user",
                "content": redact(
                    f"That reply is not a valid `{name}` object: {problem}\n"
                    "Answer again with only the JSON object, matching the schema exactly."
                ),
            },
        ]
        content = self._complete(name, schema, messages, deadline)
        try:
            return _parse(reply, content)
        except (ValidationError, ValueError) as second:
            raise InvalidReply(
                f"{self.config.base_url}: the `{name}` reply is still invalid after one repair: "
                f"{_problem(second)}"
            ) from None

    def embeddings(self, texts: list[str], *, timeout: float | None = None) -> list[list[float]]:
        """Vectors for `texts` from /v1/embeddings with `[verifier] embeddings_model`."""
        self.calls += 1
        if not self.config.embeddings_model:
            raise ModelUnavailable("no embeddings_model under [verifier] in loopd.toml")
        if not texts:
            return []
        self._client()  # set up before the deadline starts, as for `structured`
        deadline = None if timeout is None else time.monotonic() + timeout
        redacted = [redact(text) for text in texts]

        def send(client: OpenAI, request_timeout: float) -> list[Any]:
            raw = client.embeddings.with_raw_response.create(
                model=self.config.embeddings_model, input=redacted, timeout=request_timeout
            )
            return _listed(_parsed(raw), "data")

        import openai

        try:
            data = self._send(send, deadline, "embeddings")
        except openai.APIStatusError as error:
            raise ModelUnavailable(
                f"{self.config.base_url}: embeddings refused with HTTP {error.status_code}: "
                f"{_error_message(error)}"
            ) from None
        data = sorted(data, key=lambda item: item.index)
        if len(data) != len(texts):
            raise ModelUnavailable(
                f"{self.config.base_url}: {len(data)} embeddings for {len(texts)} texts"
            )
        return [list(item.embedding) for item in data]

    @property
    def model(self) -> str:
        """The verifier model: `[verifier] model`, else the first one the server listed."""
        return self._model or "default"

    # -- internals ----------------------------------------------------------------

    def _resolve_model(self, deadline: float | None) -> str:
        """`[verifier] model`, or else (asked once) the first model the server lists."""
        if not self._model:
            import openai

            def send(client: OpenAI, request_timeout: float) -> list[Any]:
                raw = client.models.with_raw_response.list(timeout=request_timeout)
                return _listed(_parsed(raw), "data")

            try:
                listed = self._send(send, deadline, "models")
                ids = [str(getattr(m, "id", "") or "") for m in listed]
            except openai.APIStatusError:  # a server without /v1/models
                ids = []
            self._model = next((i for i in ids if i), "default")
        return self._model

    def _client(self) -> OpenAI:
        if not self.config.base_url:
            raise ModelUnavailable(
                "no [verifier] base_url in loopd.toml; set it to the local endpoint, "
                'e.g. base_url = "http://127.0.0.1:8000/v1"'
            )
        with self._lock:
            if self._openai is None:
                from openai import OpenAI  # heavy: imported on the first call only

                # max_retries=0: the openai package would retry on its own, with its own
                # backoff and Retry-After reading; `_send` and `self.retry` are the only ones.
                self._openai = OpenAI(
                    base_url=self.config.base_url, api_key=self.api_key, max_retries=0
                )
            return self._openai

    def _complete(
        self,
        name: str,
        schema: dict[str, Any],
        messages: list[dict[str, str]],
        deadline: float | None,
    ) -> str:
        """One chat completion, stepping down the response formats the server rejects."""
        import openai

        model = self._resolve_model(deadline)
        start = FORMATS.index(self.format)
        for index in range(start, len(FORMATS)):
            fmt = FORMATS[index]
            extra: dict[str, Any] = {}
            if fmt == "json_schema":
                extra["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": name, "strict": True, "schema": schema},
                }
            elif fmt == "json_object":
                extra["response_format"] = {"type": "json_object", "schema": schema}

            def send(client: OpenAI, request_timeout: float, extra: dict[str, Any] = extra) -> str:
                raw = client.chat.completions.with_raw_response.create(
                    model=model,
                    # The type: ignore below: the SDK types each message role as its own TypedDict;
                    # ours are plain dicts it accepts.
                    messages=messages,  # type: ignore[arg-type]
                    temperature=0,
                    timeout=request_timeout,
                    **extra,
                )
                parsed = _parsed(raw)
                usage = getattr(parsed, "usage", None)
                self.tokens += int(getattr(usage, "total_tokens", 0) or 0)
                choices = _listed(parsed, "choices")
                if not choices:
                    return ""
                message = getattr(choices[0], "message", None)
                return getattr(message, "content", None) or ""

            try:
                content = self._send(send, deadline, name)
            except openai.APIStatusError as error:
                if _rejects_format(error) and index + 1 < len(FORMATS):
                    continue
                raise ModelUnavailable(
                    f"{self.config.base_url}: `{name}` refused with HTTP {error.status_code}: "
                    f"{_error_message(error)}"
                ) from None
            self.format = fmt
            return content
        raise AssertionError("unreachable: the last format sends no response_format")

    def _send(self, send: Callable[[OpenAI, float], Any], deadline: float | None, what: str) -> Any:
        """One request, retried by `self.retry` on transient failures.

        An answer that only a change of request can fix (a 4xx, a rejected response_format)
        is raised as `openai.APIStatusError` for the caller to decide on. A transient failure
        that outlasts the policy, or a server asking to come back later than the policy (or
        the deadline) can wait, becomes ModelUnavailable saying when to retry.
        """
        import openai

        client = self._client()
        per_request = self.config.timeout.total_seconds()
        tries = 0
        last = "out of time"
        while True:
            request_timeout = per_request
            if deadline is not None:
                request_timeout = min(per_request, deadline - time.monotonic())
                if request_timeout <= 0:
                    raise ModelUnavailable(
                        f"{self.config.base_url}: `{what}` out of time after {tries} tries: {last}"
                    )
            self.requests += 1
            tries += 1
            retry_after = None
            try:
                return send(client, request_timeout)
            except openai.APIStatusError as error:
                if _rejects_format(error) or not _transient(error.status_code):
                    raise
                retry_after = retry_after_of(error.response.headers)
                last = f"HTTP {error.status_code}: {_error_message(error)}"
            except openai.APITimeoutError:
                last = f"no answer within {request_timeout:g}s"
            except openai.APIConnectionError as error:
                last = f"unreachable ({error.__cause__ or error})"
            except (openai.APIResponseValidationError, _Malformed, ValueError) as error:
                # ValueError: a JSON content type with a body that does not parse.
                last = f"malformed answer ({_one_line(str(error))})"
            left = None if deadline is None else deadline - time.monotonic()
            wait = self.retry.next_wait(tries, retry_after, left)
            if wait is None:
                raise ModelUnavailable(
                    f"{self.config.base_url}: `{what}` failed after {tries} tries: {last}"
                    + _come_back(retry_after),
                    retry_after=retry_after,
                )
            self.sleep(wait)


def _transient(status: int) -> bool:
    """Whether an HTTP status may pass by itself (timeouts, rate limits, server errors)."""
    return status >= 500 or status in (408, 409, 429)


def _rejects_format(error: Any) -> bool:
    """Whether an error answer is about the response_format sent, whatever its status.

    400 and 422 step down too: some servers reject an unknown format with a bare message.
    """
    if error.status_code in (400, 422):
        return True
    body = getattr(error, "body", None)
    inner = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(inner, dict) and inner.get("param") == "response_format":
        return True
    return bool(_FORMAT_REJECTED.search(_error_text(error)))


def _parsed(raw: Any) -> Any:
    """The openai package's object for a successful raw answer, checked to be JSON first.

    Left to itself the package hands back a body that is not JSON (a proxy's HTML error
    page) as a plain string, or fails on it inside its own parsing, and builds a JSON body
    of another shape as an object without the expected fields.
    """
    text = raw.http_response.text
    try:
        json.loads(text)
    except ValueError:
        raise _Malformed(
            f"a {raw.status_code} answer that is not JSON: {_one_line(text)[:120]!r}"
        ) from None
    try:
        return raw.parse()
    except (AttributeError, TypeError, KeyError, ValueError) as error:  # its parsing failed
        raise _Malformed(f"an answer of another shape ({type(error).__name__})") from None


def _listed(response: Any, field: str) -> list[Any]:
    """`response.<field>` as a list; anything else is a malformed answer."""
    value = getattr(response, field, None)
    if not isinstance(value, list):
        raise _Malformed(f"a 200 answer without `{field}`")
    return value


def _come_back(retry_after: float | None) -> str:
    """The sentence saying when the server asked to be asked again."""
    if retry_after is None:
        return ""
    when = (utc_now() + timedelta(seconds=retry_after)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"; the server asks to retry after {retry_after:g}s (at {when})"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _schema_of(reply: type[BaseModel]) -> dict[str, Any]:
    strict = getattr(reply, "strict_schema", None)
    if callable(strict):
        return strict()

    return strict_schema(reply.model_json_schema())


def _with_schema(system: str, name: str, schema: dict[str, Any]) -> str:
    """The system prompt with the reply's schema stated: servers that ignore formats see it too.

    The phrase "the `NAME` reply" is also how the scripted test server routes a request.
    """
    return (
        f"{system.rstrip()}\n\n"
        f"Answer with one JSON object, the `{name}` reply, and nothing else: no prose, no "
        "Markdown fence. It must match this JSON schema exactly (every property present, "
        f"no other property):\n{json.dumps(schema, indent=1)}"
    )


def _parse(reply: type[T], content: str) -> T:
    """Validate a reply, tolerating thinking blocks, a Markdown fence and prose around it."""
    text = _THINK.sub("", content).strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    if not text.startswith("{"):
        start, end = text.find("{"), text.rfind("}")
        if start < 0 or end < start:
            raise ValueError(f"no JSON object in the reply: {content[:200]!r}")
        text = text[start : end + 1]
    try:
        return reply.model_validate_json(text)
    except ValidationError as error:
        if not any(e["type"] == "json_invalid" for e in error.errors()):
            raise
    # Small local models write raw newlines and tabs inside strings; JSON forbids them, but
    # what they mean is plain, so they are read rather than sent back for a repair.
    return reply.model_validate(json.loads(text, strict=False))


def _problem(error: Exception) -> str:
    if isinstance(error, ValidationError):
        parts = []
        for item in error.errors()[:10]:
            where = ".".join(str(p) for p in item["loc"]) or "(the reply)"
            parts.append(f"{where}: {item['msg']}")
        return "; ".join(parts)
    return str(error)


def _error_text(error: Any) -> str:
    """The whole message of an error answer."""
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    return str(getattr(error, "message", error))


def _error_message(error: Any) -> str:
    return _error_text(error)[:300]
