"""Tests that kill mutants of redaction (daemon/redact.py) that the other tests let live
(bench/mutation.py): the edges of what counts as a high-entropy value."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from daemon.redact import redact

MARK = "[REDACTED:secret]"


def entropy(value: str) -> float:
    """Bits a character, computed here on its own so the test does not trust the code's."""
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def test_a_hex_token_assigned_to_a_token_name_is_redacted() -> None:
    token = "9f86d081884c7d659a2feaa0c55ad015"  # a sha256 prefix: hex, about 3.6 bits a char
    assert 3.0 < entropy(token) < 4.0
    assert redact(f"DEPLOY_TOKEN={token}") == f"DEPLOY_TOKEN={MARK}"
    assert redact(f'"api_key": "{token}"') == f'"api_key": "{MARK}"'


def test_three_bits_a_character_is_the_threshold() -> None:
    at = "a1b2c3d4a1b2c3d4"  # 8 symbols, each twice: exactly 3 bits
    assert entropy(at) == 3.0
    assert redact(f"DEPLOY_TOKEN={at}") == f"DEPLOY_TOKEN={MARK}"
    below = "a1b2c3d4a1b2c3d4a"  # one symbol more often than the rest: under 3 bits
    assert entropy(below) < 3.0
    assert redact(f"DEPLOY_TOKEN={below}") == f"DEPLOY_TOKEN={below}"
    low = "a1a1a1a1b2b2b2b2"  # 2 bits
    assert redact(f"DEPLOY_TOKEN={low}") == f"DEPLOY_TOKEN={low}"


def test_sixteen_characters_is_the_shortest_token() -> None:
    sixteen = "a1b2c3d4e5a1b2c3"  # over 3 bits a character, under what gitleaks asks
    assert redact(f"session_token={sixteen}") == f"session_token={MARK}"
    assert redact(f"session_token={sixteen[:15]}") == f"session_token={sixteen[:15]}"


@pytest.mark.parametrize(
    "value, secret",
    [
        ("48213957604817263950", False),  # digits only: an id, a timestamp
        ("QWERtyuiASDFghjkZX", True),  # letters in mixed case
        ("qwertyuiasdfghjkzx", False),  # one case, no digit: a word
        ("ClearTextPasswordValue", False),  # CamelCase words: a name, not a key
        ("q8w7e6r5t4y3u2i1", True),  # letters and digits
    ],
)
def test_a_token_needs_letters_and_digits_or_mixed_case(value: str, secret: bool) -> None:
    assert entropy(value) >= 3.0
    expected = f"access_key={MARK}" if secret else f"access_key={value}"
    assert redact(f"access_key={value}") == expected
