"""Secret redaction before anything is written to state or sent to a model."""

from __future__ import annotations


def redact(text: str) -> str:
    """Replace secrets in `text` with redaction markers."""
    return text
