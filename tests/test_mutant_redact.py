"""Tests that kill mutants of redaction (daemon/redact.py) that the other tests let live
(bench/mutation.py): the edges of what counts as a high-entropy value."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from daemon.redact import Redactor, _opens, redact, redact_value

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


VALUE = "a1b2c3d4e5a1b2c3"  # 16 characters, letters and digits, over 3 bits a character


@pytest.mark.parametrize(
    "text, expected",
    [
        # `--name value` is an option; `name value` is prose.
        (f"x --token {VALUE} y", f"x --token {MARK} y"),
        (f"--api-key {VALUE}", f"--api-key {MARK}"),
        (f"api-key {VALUE}", f"api-key {VALUE}"),
        (f"my key {VALUE}", f"my key {VALUE}"),
        (f"key={VALUE},other", f"key={MARK},other"),
        # A password needs 8 characters that are not a reference or a placeholder.
        ("password=hunter22", f"password={MARK}"),
        ("password=hunter2", "password=hunter2"),
        ("password=$PASSWORD", "password=$PASSWORD"),
        ("password=changeme", "password=changeme"),
        ("PASSWD: Changeme", "PASSWD: Changeme"),
        ("secret: correct-horse", "secret: correct-horse"),
        ("secret: Tr0ub4dor&3", f"secret: {MARK}&3"),
        # Not ASCII: the plain scan, same answers.
        ("ü password=hunter22x", f"ü password={MARK}"),
        ("ü token value", "ü token value"),
    ],
)
def test_assignments_and_options_are_told_from_prose(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_provider_shapes_need_what_a_real_token_has() -> None:
    assert redact("sk-abc123def456ghi789jkl012") == "[REDACTED:openai-key]"
    assert redact("sk-abcdefghijklmnopqrstuvwxyz") == "sk-abcdefghijklmnopqrstuvwxyz"
    assert redact("sk-12345678901234567890123") == "sk-12345678901234567890123"
    assert redact("https://bob:s3cret@host/x") == "https://bob:[REDACTED:password]@host/x"
    assert redact("https://bob:[REDACTED:x]@host") == "https://bob:[REDACTED:x]@host"
    jwt = 'curl -H "X: Bearer aaaaaaaa.bbbbbbbb.cccccccc"'
    assert redact(jwt) == 'curl -H "X: Bearer [REDACTED:bearer-token]"'
    plain = 'curl -H "X: Bearer aaaaaaaabbbbbbbbcccccccc"'
    assert redact(plain) == plain
    aws = "AKIAIOSFODNN7EXAMPLE wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    assert redact(aws) == "[REDACTED:aws-access-key] [REDACTED:aws-secret-key]"
    low = "AKIAIOSFODNN7EXAMPLE " + "ab" * 20  # 40 characters of 1 bit: not a key
    assert redact(low) == "[REDACTED:aws-access-key] " + "ab" * 20


def test_values_are_redacted_with_their_names() -> None:
    data = {"api_token": VALUE, "x": ["password=hunter22"], "n": 5, "t": ("a",), "note": VALUE}
    assert redact_value(data) == {
        "api_token": MARK,
        "x": [f"password={MARK}"],
        "n": 5,
        "t": ["a"],
        "note": VALUE,
    }
    assert redact_value(VALUE, "secret_key") == MARK
    assert redact_value(VALUE) == VALUE
    assert redact_value("hello", "token") == "hello"


def test_a_name_at_a_lines_end_makes_the_next_line_its_value() -> None:
    value = VALUE + "f6"
    r = Redactor()
    assert [r.line(x) for x in ["<apiToken>", value]] == [
        "<apiToken>",
        "[REDACTED:generic-api-key]",
    ]
    r = Redactor()
    assert [r.line(x) for x in ["+<apiToken>", "+" + value]] == [
        "+<apiToken>",
        "+[REDACTED:generic-api-key]",
    ]
    # An ordinary line, or an empty one in between, names nothing.
    r = Redactor()
    assert [r.line(x) for x in ["hello", value]] == ["hello", value]
    r = Redactor()
    assert [r.line(x) for x in ["<apiToken>", "", value]] == ["<apiToken>", "", value]


@pytest.mark.parametrize(
    "end, opens",
    [
        ("<apiToken>", True),
        ("<api_token.v-1>", True),
        ("<a@b.c>", False),
        ("-> x>", False),
        ('"key":', True),
        ("PW =", True),
        ("name_:", True),
        ("def f() -> dict[str, int]:", False),
        ("x", False),
        ("", False),
    ],
)
def test_which_line_ends_name_a_value(end: str, opens: bool) -> None:
    assert _opens(end) is opens


def test_a_private_key_block_is_followed_across_lines() -> None:
    r = Redactor()
    out = [
        r.line(x)
        for x in [
            "-----BEGIN RSA PRIVATE KEY-----",
            "abc",
            "-----END RSA PRIVATE KEY----- tail",
            "after",
        ]
    ]
    assert out == [
        "[REDACTED:private-key]",
        "[REDACTED:private-key]",
        "[REDACTED:private-key] tail",
        "after",
    ]
    assert not r.in_private_key and not r.touched


def test_more_provider_shapes_and_their_markers() -> None:
    webhook = "https://hooks.slack.com/services/T0000AAAA/B0000BBBB/abcdefghijklmnopqrstuvwx"
    assert redact(webhook) == "[REDACTED:slack-webhook]"
    # A project key's random part starts after `sk-proj-`, dashes and all.
    assert redact("sk-proj-1234567890-abcdefghijklmnop") == "[REDACTED:openai-key]"


def test_a_provider_secret_after_a_redacted_one_is_found_where_it_now_stands() -> None:
    stripe = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
    got = redact(f"password=hunter22x stripe {stripe} end")
    assert got == f"password={MARK} stripe [REDACTED:stripe-access-token] end"
    token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    got = redact(f"{token} then {stripe} end")
    assert got == "[REDACTED:github-token] then [REDACTED:stripe-access-token] end"
