"""What the rule modules need from the verifier model: a Protocol, so tests can pass a fake."""

from __future__ import annotations

from typing import Protocol, TypeVar

from pydantic import BaseModel

T = TypeVar("T", bound=BaseModel)


class StructuredModel(Protocol):
    """What post-mortems, the verifier and the evaluator use of `ModelClient`."""

    @property
    def model(self) -> str: ...

    def structured(
        self, name: str, reply: type[T], system: str, user: str, *, timeout: float | None = None
    ) -> T: ...

    def embeddings(
        self, texts: list[str], *, timeout: float | None = None
    ) -> list[list[float]]: ...
