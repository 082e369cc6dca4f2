"""Secret redaction: realistic fake secrets go, ordinary code and text stay."""

from __future__ import annotations

import json

import pytest

from daemon.redact import PRIVATE_KEY_MARK, Redactor, redact

# Fake secrets in the real shapes; none of them is a live credential.
AWS_KEY_ID = "AKIAZ3Q7XW5T9RPLM2KD"
AWS_SECRET = "q8Vd2Lr+9sKf3JmX0pTzW7nB4cY6hE1uR5aG/oNi"
GITHUB = "ghp_" + "R4nd0mT0k3nV4lu3sF0rT3st1ngXyZ987654"
GITHUB_PAT = (
    "github_pat_11ABCDE2F0" + "aBcDeFgHiJkLmNoPqRsTuV_wXyZ0123456789abcdefGHIJKLmnopQRSTuvw"
)
OPENAI = "sk-proj-" + "Xk29fLq8Zr3vN7bM1cT5yW0pH4jD6sG2"
OPENAI_LEGACY = "sk-" + "4fGh7Jk9Lm2Nq5Rs8Tv1Wx3Yz6Ab0Cd9Ef2Gh5Ij8Kl1Mn"
ANTHROPIC = "sk-ant-api03-" + "Qw3rTy8UiOp2AsDf6GhJkL9ZxCvBnM1_qWeRtYuIoP-aSdFgHjKl"
SLACK = "xoxb-" + "2048163052-3721936480215-Kq8ZpL3vR9mX2bT7nW4cY1sD"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi2mxdOwMsSIwwJd4F4ZrL3pMkN\n"
    "Qd3KxS8mL2vZp9T7rY4nB1cW6hE0uJ5aG8oNiq8Vd2Lr9sKf3JmX0pTzW7nB4cY6\n"
    "-----END RSA PRIVATE KEY-----"
)
HIGH_ENTROPY = "Zx81kLm92QxZ7pR4tW1vB6nC"


@pytest.mark.parametrize(
    ("text", "secret", "marker"),
    [
        (f"export AWS_ACCESS_KEY_ID={AWS_KEY_ID}", AWS_KEY_ID, "aws-access-key"),
        (f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET, "aws-secret-key"),
        (f"{AWS_KEY_ID},{AWS_SECRET}", AWS_SECRET, "aws-secret-key"),
        (f"git push https://x:{GITHUB}@github.com/o/r", GITHUB, "github-token"),
        (f"token is {GITHUB}.", GITHUB, "github-token"),
        (f"GH={GITHUB_PAT}", GITHUB_PAT, "github-token"),
        (f"OPENAI_API_KEY={OPENAI}", OPENAI, "openai-key"),
        (f"client = OpenAI(api_key='{OPENAI_LEGACY}')", OPENAI_LEGACY, "openai-key"),
        (f"x-api-key: {ANTHROPIC}", ANTHROPIC, "anthropic-key"),
        (f"SLACK_BOT={SLACK}", SLACK, "slack-token"),
        (f'{{"api_key": "{HIGH_ENTROPY}"}}', HIGH_ENTROPY, "secret"),
        (f"SECRET_TOKEN={HIGH_ENTROPY}", HIGH_ENTROPY, "secret"),
        (f"apiKey: '{HIGH_ENTROPY}'", HIGH_ENTROPY, "secret"),
        (f"--api-key {HIGH_ENTROPY}", HIGH_ENTROPY, "secret"),
        ("DB_PASSWORD=hunter2hunter2", "hunter2hunter2", "secret"),
        ('password: "c0rrect-h0rse"', "c0rrect-h0rse", "secret"),
        ("postgres://admin:S3cr3tPass@db.internal/app", "S3cr3tPass", "password"),
        (
            "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl",
            "eyJhbGciOiJIUzI1NiJ9",
            "bearer-token",
        ),
    ],
)
def test_secrets_are_replaced_by_markers(text: str, secret: str, marker: str) -> None:
    out = redact(text)
    assert secret not in out
    assert f"[REDACTED:{marker}]" in out


def test_pem_block_is_removed_whole_and_the_text_around_it_stays() -> None:
    out = redact(f"before\n{PEM}\nafter")
    assert out == f"before\n{PRIVATE_KEY_MARK}\nafter"


def test_pem_block_inside_a_json_string_is_removed() -> None:
    line = json.dumps({"type": "tool_result", "output": f"cat id_rsa\n{PEM}\n$ "})
    out = redact(line)
    assert "MIIEpAIBAAKCAQEA" not in out
    assert json.loads(out)["output"] == f"cat id_rsa\n{PRIVATE_KEY_MARK}\n$ "


def test_unterminated_pem_block_is_cut_to_the_end() -> None:
    out = redact("key follows -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA")
    assert out == f"key follows {PRIVATE_KEY_MARK}"


def test_secret_inside_json_escaped_text_is_found() -> None:
    inner = json.dumps({"secret_key": HIGH_ENTROPY})
    line = json.dumps({"type": "tool_result", "output": inner})
    out = redact(line)
    assert HIGH_ENTROPY not in out
    assert json.loads(json.loads(out)["output"]) == {"secret_key": "[REDACTED:secret]"}


def test_redactor_carries_a_private_key_across_lines() -> None:
    redactor = Redactor()
    lines = ["$ cat key.pem", *PEM.splitlines(), "done"]
    out = [redactor.line(line) for line in lines]
    assert out[0] == "$ cat key.pem"
    assert out[1:-1] == [PRIVATE_KEY_MARK] * (len(lines) - 2)
    assert out[-1] == "done"
    assert not redactor.in_private_key


def test_redactor_keeps_text_after_the_end_line() -> None:
    redactor = Redactor()
    redactor.line("-----BEGIN EC PRIVATE KEY-----")
    assert redactor.in_private_key
    assert redactor.line("MHcCAQEEIB") == PRIVATE_KEY_MARK
    out = redactor.line(f"-----END EC PRIVATE KEY----- then {GITHUB}")
    assert out == f"{PRIVATE_KEY_MARK} then [REDACTED:github-token]"
    assert redactor.line("plain") == "plain"


@pytest.mark.parametrize(
    "text",
    [
        "commit 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39 fixed the parser",
        "git log --oneline: 3f2a9c1 Merge branch 'main'",
        "request 550e8400-e29b-41d4-a716-446655440000 finished in 12ms",
        "def get_api_key(self):\n    return os.environ['OPENAI_API_KEY']",
        'api_key_env = "OPENAI_API_KEY"',
        "password = getpass.getpass()",
        "password=hashed_password",
        "secret = os.environ['APP_SECRET']",
        "token = self.tokenizer.encode(text)",
        "password: ${DB_PASSWORD}",
        '{"input_tokens": 12345, "output_tokens": 99, "cache_key": "users"}',
        "max_tokens = 1000000",
        "The keyboard monkey typed tokens into the secret garden.",
        "key: value",
        "sk-learn and task-runner-sk-thing are not keys",
        "PWD=/work/main OLDPWD=/home/user",
        "ssh -i ~/.ssh/id_rsa git@github.com:org/repo.git",
        "https://example.com/docs?page=2#section",
        "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n"
        "-----END PUBLIC KEY-----",
        "Ünïcödé text with a key word and numbers 1234",
        "",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact(text) == text


def test_redaction_is_stable_when_applied_twice() -> None:
    text = f"AWS {AWS_KEY_ID} {GITHUB} api_key={HIGH_ENTROPY}\n{PEM}"
    once = redact(text)
    assert redact(once) == once
