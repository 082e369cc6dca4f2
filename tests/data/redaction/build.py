"""Builds the labelled redaction sets from a gitleaks checkout (run once; the sets are frozen).

    python tests/data/redaction/build.py GITLEAKS_CHECKOUT

gitleaks (MIT, Copyright (c) 2019 Zachary Rice) writes each rule's true and false positives
(`tps`, `fps`) as Go code in cmd/generate/config/rules/*.go, some literal, some generated
from a regex with `secrets.NewSecret`. This script evaluates that small subset of Go (string
literals, `+`, `[]string{}`, `append`, `fmt.Sprintf` and the generators of utils/) with a
fixed seed, and takes each example's secret as gitleaks' own rule captures it. It writes
gitleaks_tps.json, gitleaks_fps.json and bare_tokens.json; control.json is written by hand.
A rerun draws new random secrets: the sets are frozen by SHA256SUMS, not by this script.
"""

from __future__ import annotations

import ast
import json
import random
import re
import sre_constants as C
import sre_parse
import string
import sys
import tomllib
from collections import Counter
from math import log2
from pathlib import Path

import re2

HERE = Path(__file__).resolve().parent
RNG = random.Random(20261202)

# -- a random string for a regex (what gitleaks' secrets.NewSecret does with reggen) --------

_CATS = {
    C.CATEGORY_DIGIT: string.digits,
    C.CATEGORY_WORD: string.ascii_letters + string.digits + "_",
    C.CATEGORY_SPACE: " ",
    C.CATEGORY_NOT_DIGIT: string.ascii_letters,
    C.CATEGORY_NOT_WORD: "-.",
    C.CATEGORY_NOT_SPACE: string.ascii_letters + string.digits,
}
_PRINTABLE = string.ascii_letters + string.digits + "_-+/=."


def _chars(items: list) -> str:
    out, negate = [], False
    for op, av in items:
        if op is C.NEGATE:
            negate = True
        elif op is C.LITERAL:
            out.append(chr(av))
        elif op is C.RANGE:
            out.extend(chr(c) for c in range(av[0], av[1] + 1))
        elif op is C.CATEGORY:
            out.extend(_CATS[av])
    if negate:
        return "".join(c for c in _PRINTABLE if c not in out)
    return "".join(out)


def _gen(parsed, groups: dict) -> str:
    out = []
    for op, av in parsed:
        if op is C.LITERAL:
            out.append(chr(av))
        elif op is C.NOT_LITERAL:
            out.append(RNG.choice([c for c in _PRINTABLE if ord(c) != av]))
        elif op is C.ANY:
            out.append(RNG.choice(string.ascii_letters + string.digits))
        elif op is C.IN:
            out.append(RNG.choice(_chars(av)))
        elif op is C.BRANCH:
            out.append(_gen(RNG.choice(av[1]), groups))
        elif op is C.SUBPATTERN:
            text = _gen(av[-1], groups)
            if av[0]:
                groups[av[0]] = text
            out.append(text)
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT):
            low, high, sub = av
            high = low + 2 if high is C.MAXREPEAT else high
            out.extend(_gen(sub, groups) for _ in range(RNG.randint(low, high)))
        elif op is C.GROUPREF:
            out.append(groups.get(av, ""))
        elif op is C.CATEGORY:
            out.append(RNG.choice(_CATS[av]))
    return "".join(out)


def new_secret(regex: str) -> str:
    """A random string matching `regex` (Go syntax, read by Python's parser)."""
    regex = regex.replace(r"\z", r"\Z").replace("[[:alnum:]]", "[A-Za-z0-9]")
    return _gen(sre_parse.parse(regex), {})


# -- the subset of Go the rule files write their examples in ------------------------------

_TOKEN = re.compile(
    r"""(?P<ws>[ \t\r]+|//[^\n]*|/\*.*?\*/)|(?P<nl>\n)|(?P<raw>`[^`]*`)"""
    r"""|(?P<str>"(?:[^"\\\n]|\\.)*")|(?P<chr>'(?:[^'\\]|\\.)+')|(?P<num>\d+)"""
    r"""|(?P<name>[A-Za-z_][A-Za-z0-9_.]*)|(?P<op>\.\.\.|:=|\+=|[-+(){}\[\],:=;*&!<>|.])""",
    re.DOTALL,
)


def tokens(source: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(source):
        m = _TOKEN.match(source, pos)
        if not m:
            out.append(("op", source[pos]))
            pos += 1
            continue
        pos = m.end()
        kind = m.lastgroup
        if kind != "ws":
            out.append((kind, m[0]))
    return out


class Unknown(Exception):
    """An expression this subset does not evaluate."""


def _string(kind: str, text: str) -> str:
    if kind == "raw":
        return text[1:-1].replace("\r", "")
    return ast.literal_eval(text)


def _utils(name: str, args: list) -> object:
    size = args[0] if args else ""
    table = {
        "utils.Numeric": f"[0-9]{{{size}}}",
        "utils.Hex": f"[a-f0-9]{{{size}}}",
        "utils.AlphaNumeric": f"[a-z0-9]{{{size}}}",
        "utils.AlphaNumericExtendedShort": f"[a-z0-9_-]{{{size}}}",
        "utils.AlphaNumericExtended": f"[a-z0-9=_\\-]{{{size}}}",
        "utils.AlphaNumericExtendedLong": f"[a-z0-9\\/=_\\+\\-]{{{size}}}",
        "utils.Hex8_4_4_4_12": "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    }
    if name in table:
        return table[name]
    raise Unknown(name)


def sample_secrets(identifier: str, secret: str) -> list[str]:
    """gitleaks' utils.GenerateSampleSecrets: the secret in 27 configuration and code forms."""
    forms = [
        '{i}Token="{s}"',
        '{i}Token = "{s}"',
        "{i}Token={s}",
        "{i}Token = {s}",
        '{\n    "{i}_token": "{s}"\n}',
        '{"config.ini": "{I}_TOKEN={s}\\nBACKUP_ENABLED=true"}',
        "<{i}Token>\n    {s}\n</{i}Token>",
        "{i}_token: {s}",
        "{i}_token: '{s}'",
        '{i}_token: "{s}"',
        'string {i}Token = "{s}";',
        'var {i}Token string = "{s}"',
        '{i}Token := "{s}"',
        "{i}Token := `{s}`",
        'String {i}Token = "{s}";',
        'var {i}Token = "{s}"',
        '${i}Token .= "{s}"',
        "{i}Token = '{s}'",
        '{i}Token = "{s}"',
        'System.setProperty("{I}_TOKEN", "{s}")',
        '  "{i}Token" => "{s}"',
        '{i}_TOKEN = "{s}"',
        '{i}_TOKEN := "{s}"',
        '{i}_TOKEN ::= "{s}"',
        '{i}_TOKEN :::= "{s}"',
        '{i}_TOKEN ?= "{s}"',
    ]
    return [
        f.replace("{i}", identifier).replace("{I}", identifier.upper()).replace("{s}", secret)
        for f in forms
    ]


class Evaluator:
    """Evaluates the statements of one Go function body, remembering its variables."""

    def __init__(self, toks: list[tuple[str, str]]) -> None:
        self.toks, self.i, self.env = toks, 0, {}
        self.validated: list[tuple[object, object]] = []

    def peek(self, k: int = 0) -> tuple[str, str]:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else ("eof", "")

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        self.i += 1
        return tok

    def skip_nl(self) -> None:
        while self.peek()[0] == "nl":
            self.i += 1

    def expr(self) -> object:
        left = self.unary()
        while self.peek() == ("op", "+"):
            self.take()
            self.skip_nl()
            right = self.unary()
            if not (isinstance(left, str) and isinstance(right, str)):
                raise Unknown("+")
            left = left + right
        return left

    def args(self) -> list:
        """Arguments up to the closing bracket (the opening one is taken)."""
        out = []
        self.skip_nl()
        while self.peek() not in (("op", ")"), ("op", "}")):
            value = self.expr()
            if self.peek() == ("op", "..."):
                self.take()
                value = ("spread", value)
            elif self.peek() == ("op", ":"):  # a map literal's key: value
                self.take()
                self.skip_nl()
                value = ("pair", value, self.expr())
            out.append(value)
            self.skip_nl()
            if self.peek() == ("op", ","):
                self.take()
            self.skip_nl()
        self.take()
        return out

    def unary(self) -> object:
        kind, text = self.take()
        if kind in ("raw", "str"):
            return _string(kind, text)
        if kind == "num":
            return text
        if (kind, text) == ("op", "["):
            self.take()  # ]
            self.take()  # string
            self.take()  # {
            return [a for a in self.args()]
        if kind == "name" and text == "map":
            while self.take() != ("op", "{"):
                pass
            return dict((a[1], a[2]) for a in self.args() if isinstance(a, tuple))
        if kind == "name":
            if self.peek() == ("op", "("):
                self.take()
                return self.call(text, self.args())
            if self.peek() == ("op", "{"):
                raise Unknown(text)
            return self.env.get(text)  # the rule itself, say: only Validate's other args count
        raise Unknown(text)

    def call(self, name: str, args: list) -> object:
        if name == "append":
            base = list(args[0])
            for a in args[1:]:
                base.extend(a[1] if isinstance(a, tuple) and a[0] == "spread" else [a])
            return base
        if name == "secrets.NewSecret":
            return new_secret(args[0])
        if name == "newPlausibleSecret":
            while True:
                s = new_secret(args[0])
                if re.search("[1-9]", s):
                    return s
        if name == "utils.GenerateSampleSecrets":
            return sample_secrets(args[0], args[1])
        if name == "utils.GenerateSampleSecret":
            return f'{args[0]}_api_token = "{args[1]}"'
        if name == "fmt.Sprintf":
            return (
                re.sub(r"%[sdv]", "{}", args[0].replace("%%", "\0"))
                .format(*args[1:])
                .replace("\0", "%")
            )
        if name == "strings.Repeat":
            return args[0] * int(args[1])
        if name == "strings.ToUpper":
            return args[0].upper()
        if name in ("utils.Validate", "utils.ValidateWithPaths"):
            self.validated.append((args[1], args[2]))
            return None
        return _utils(name, args)

    def statement(self) -> None:
        start = self.i
        try:
            if self.peek() == ("name", "var"):
                self.take()
            kind, text = self.peek()
            if kind == "name" and self.peek(1) in (("op", ":="), ("op", "=")):
                self.i += 2
                self.skip_nl()
                self.env[text] = self.expr()
            elif (kind, text) == ("name", "return"):
                self.take()
                self.expr()
            else:
                raise Unknown(text)
        except (Unknown, IndexError, ValueError, SyntaxError, KeyError, TypeError):
            self.i = start
            self.skip_statement()

    def skip_statement(self) -> None:
        depth = 0
        while self.peek()[0] != "eof":
            kind, text = self.take()
            if text in "({[" and kind == "op":
                depth += 1
            elif text in ")}]" and kind == "op":
                depth -= 1
                if depth < 0:
                    self.i -= 1
                    return
            elif kind == "nl" and depth == 0:
                return

    def run(self) -> None:
        while self.peek()[0] != "eof":
            self.skip_nl()
            if self.peek() == ("op", "}"):
                self.take()
                continue
            self.statement()


def functions(source: str) -> list[tuple[str, str]]:
    """(name, body) of each top-level function returning a rule."""
    out = []
    for chunk in re.split(r"^func ", source, flags=re.M)[1:]:
        m = re.match(r"(\w+)\(\) \*config\.Rule \{\n", chunk)
        if m:
            out.append((m[1], chunk[m.end() :]))
    return out


# -- the sets -----------------------------------------------------------------------------


def entropy(text: str) -> float:
    n = len(text)
    return -sum(c / n * log2(c / n) for c in Counter(text).values()) if n else 0.0


def secret_of(rule: dict, compiled, text: str) -> str:
    """The secret gitleaks' rule captures in `text` (its secret group, else the first group)."""
    for m in compiled.finditer(text):
        group = rule.get("secretGroup", 0)
        if not group:
            group = next((g for g in range(1, len(m.groups()) + 1) if m.group(g)), 0)
        secret = m.group(group) or m.group(0)
        if entropy(secret) >= rule.get("entropy", 0):
            return secret
    return ""


# Tokens of services gitleaks finds only beside a keyword, or not at all, in the shapes the
# services document (their prefixes); each is printed bare, without any keyword near it.
SUPPLEMENT = [
    ("mailchimp", r"[0-9a-f]{32}-us[1-9]{1,2}"),
    ("mapbox", r"sk\.eyJ1Ijoi[A-Za-z0-9]{20}\.[A-Za-z0-9_-]{22}"),
    ("mailgun", r"key-[0-9a-f]{32}"),
    ("newrelic", r"NRAK-[A-Z0-9]{27}"),
    ("typeform", r"tfp_[A-Za-z0-9]{44}_[A-Za-z0-9]{14}"),
    (
        "microsoft-teams",
        r"https://[a-z]{6}\.webhook\.office\.com/webhookb2/[a-f0-9]{8}-[a-f0-9]{4}-"
        r"[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}@[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-"
        r"[a-f0-9]{12}/IncomingWebhook/[a-f0-9]{32}/[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}"
        r"-[a-f0-9]{12}",
    ),
    ("telegram", r"[1-9][0-9]{9}:AA[A-Za-z0-9_-]{33}"),
    ("yandex", r"AQVN[A-Za-z0-9_-]{36}"),
    ("plaid", r"access-production-[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}"),
    ("jfrog", r"cmVmdGtuOjAxOj[A-Za-z0-9]{50}"),
    ("sonarqube", r"sqp_[a-f0-9]{40}"),
    ("defined-networking", r"dnkey-[A-Z0-9]{26}-[A-Z0-9]{52}"),
    ("dropbox", r"sl\.[A-Za-z0-9_-]{136}"),
    ("contentful", r"CFPAT-[A-Za-z0-9_-]{43}"),
    ("lob", r"live_[a-f0-9]{35}"),
    ("gocardless", r"live_[A-Za-z0-9_=-]{40}"),
    ("discord", r"https://discord\.com/api/webhooks/[0-9]{18}/[A-Za-z0-9_-]{68}"),
    ("replicate", r"r8_[A-Za-z0-9]{37}"),
    ("groq", r"gsk_[A-Za-z0-9]{52}"),
    ("xai", r"xai-[A-Za-z0-9]{80}"),
    ("nvidia", r"nvapi-[A-Za-z0-9_-]{64}"),
    ("tavily", r"tvly-[A-Za-z0-9]{32}"),
    ("openrouter", r"sk-or-v1-[a-f0-9]{64}"),
    ("google-oauth", r"ya29\.[A-Za-z0-9_-]{100}"),
    ("docker", r"dckr_pat_[A-Za-z0-9_-]{27}"),
    ("figma", r"figd_[A-Za-z0-9_-]{40}"),
    ("posthog", r"phx_[A-Za-z0-9]{47}"),
    ("resend", r"re_[A-Za-z0-9]{8}_[A-Za-z0-9]{24}"),
    ("langsmith", r"lsv2_pt_[a-f0-9]{32}_[a-f0-9]{10}"),
    ("render", r"rnd_[A-Za-z0-9]{32}"),
    ("supabase", r"sbp_[a-f0-9]{40}"),
    ("netlify", r"nfp_[A-Za-z0-9]{36}"),
    ("circleci", r"CCIPAT_[A-Za-z0-9]{22}_[a-f0-9]{40}"),
    ("buildkite", r"bkua_[a-f0-9]{40}"),
    ("pinecone", r"pcsk_[A-Za-z0-9]{5}_[A-Za-z0-9]{63}"),
    ("azure-storage", r"AccountKey=[A-Za-z0-9+/]{86}=="),
    ("tailscale", r"tskey-auth-[A-Za-z0-9]{17}-[A-Za-z0-9]{33}"),
    ("neon", r"napi_[a-z0-9]{64}"),
    ("fireworks", r"fw_[A-Za-z0-9]{24}"),
    ("cerebras", r"csk-[a-z0-9]{48}"),
    ("voyage", r"pa-[A-Za-z0-9_-]{43}"),
    ("elevenlabs", r"sk_[a-f0-9]{48}"),
    ("scaleway", r"SCW[A-Z0-9]{17}"),
    ("tencent", r"AKID[A-Za-z0-9]{32}"),
    ("braintree", r"access_token\$production\$[a-z0-9]{16}\$[a-f0-9]{32}"),
    ("razorpay", r"rzp_live_[A-Za-z0-9]{14}"),
    ("bitbucket", r"ATBB[A-Za-z0-9]{32}[A-F0-9]{8}"),
    ("nuget", r"oy2[a-z0-9]{43}"),
    ("crates-io", r"cio[A-Za-z0-9]{32}"),
    ("instagram", r"IGQV[A-Za-z0-9_-]{150}"),
    ("pinterest", r"pina_[A-Z0-9]{32}"),
    ("intercom", r"dG9rO[A-Za-z0-9]{55}="),
    ("hubspot", r"pat-na1-[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}"),
    ("salesforce", r"00D[A-Za-z0-9]{12}![A-Za-z0-9._]{96}"),
    ("clickup", r"pk_[0-9]{8}_[A-Z0-9]{32}"),
    ("launchdarkly", r"api-[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}"),
    ("mailersend", r"mlsn\.[a-f0-9]{64}"),
    ("asana", r"2/[0-9]{16}/[0-9]{16}:[a-f0-9]{32}"),
]


def bare_tokens(tps: list[dict], rules: dict, compiled: dict) -> list[dict]:
    """Provider tokens alone in a sentence: gitleaks' tps its rule finds bare, and SUPPLEMENT."""
    out, seen = [], set()
    for tp in tps:
        secret, rid = tp["secret"], tp["rule"]
        if "\n" in secret or secret in seen or sum(t["rule"] == rid for t in out) >= 3:
            continue
        if secret_of(rules[rid], compiled[rid], f"The deploy used {secret} and it worked."):
            seen.add(secret)
            service = rid.split("-")[0]
            out.append({"service": service, "rule": rid, "secret": secret})
    for service, regex in SUPPLEMENT:
        for _ in range(2):
            out.append({"service": service, "rule": "", "secret": new_secret(regex)})
    return out


def control() -> list[str]:
    """Text that must stay verbatim: git SHAs, checksums, uuids, test ids, lockfile hashes."""
    hexs = lambda n: new_secret(f"[a-f0-9]{{{n}}}")  # noqa: E731
    b64 = lambda n: new_secret(f"[A-Za-z0-9+/]{{{n}}}")  # noqa: E731
    uuid = lambda: new_secret("[a-f0-9]{8}-[a-f0-9]{4}-4[a-f0-9]{3}-[89ab][a-f0-9]{3}-[a-f0-9]{12}")  # noqa: E731
    out = []
    for _ in range(3):
        sha, short = hexs(40), hexs(7)
        out += [
            f"commit {sha}",
            f"Merge: {hexs(7)} {hexs(7)}",
            f"{short} Fix the token refresh when the secret key rotates",
            f"HEAD is now at {short} Rename api_key to api_key_env",
            f"[main {short}] Store the password hash with argon2",
            f"{sha}\trefs/heads/main",
            f"{hexs(40)} {sha} Alice <alice@example.com> 1764633600 +0000\tcommit: add auth",
            f"git rev-parse HEAD -> {sha}",
            f"index {hexs(7)}..{hexs(7)} 100644",
            f"From {sha} Mon Sep 17 00:00:00 2001",
            f"{hexs(64)}  dist/loopd-0.1.0.tar.gz",
            f"SHA256 (secrets-manager.zip) = {hexs(64)}",
            f"sha256:{hexs(64)}",
            f"Digest: sha256:{hexs(64)}",
            f"docker pull ghcr.io/org/token-service@sha256:{hexs(64)}",
            f"md5sum: {hexs(32)}  keys.tar",
            f"request {uuid()} finished in 12ms",
            f'{{"request_id": "{uuid()}", "session_id": "{uuid()}", "trace": "{uuid()}"}}',
            f"key_id={uuid()}",
            f"token_id: {uuid()}",
            f"tool_use_id toolu_{new_secret('[A-Za-z0-9]{24}')}",
            f'    "integrity": "sha512-{b64(86)}==",',
            f'  "node_modules/@octokit/auth-token": {{"version": "2.5.0", "integrity": '
            f'"sha512-{b64(86)}=="}}',
            f"  integrity sha512-{b64(86)}==",
            f"  resolution: {{integrity: sha512-{b64(86)}==}}",
            f'checksum = "{hexs(64)}"',
            f'name = "secret-service"\nversion = "3.0.1"\nsource = '
            f'"registry+https://github.com/rust-lang/crates.io-index"\nchecksum = "{hexs(64)}"',
            f"github.com/golang-jwt/jwt/v4 v4.5.0 h1:{b64(43)}=",
            f"golang.org/x/oauth2 v0.13.0/go.mod h1:{b64(43)}=",
            f'{{file = "cryptography-41.0.0.tar.gz", hash = "sha256:{hexs(64)}"}}',
            f"keyring==24.3.0 --hash=sha256:{hexs(64)}",
        ]
    out += [
        "tests/test_auth.py::test_token_refresh[secret-key-1] PASSED",
        "tests/test_api.py::test_api_key_rotation[sk_live-expired] FAILED",
        "tests/test_x.py::test_y[param-1]",
        "tests/test_password.py::TestHash::test_password_verify[argon2-16] PASSED  [ 42%]",
        "FAILED tests/test_secrets.py::test_secret_name_is_kept - AssertionError",
        "tests/unit/test_tokens.py::test_parse[Bearer-token-abc] SKIPPED (needs network)",
        "ERROR tests/test_credentials.py::test_credentials_file_missing[aws-default]",
    ]
    return out


def main() -> int:
    checkout = Path(sys.argv[1])
    config = tomllib.loads((checkout / "config" / "gitleaks.toml").read_text())
    rules = {r["id"]: r for r in config["rules"] if "regex" in r}
    options = re2.Options()
    options.max_mem = 64 << 20
    compiled = {rid: re2.compile(r["regex"], options) for rid, r in rules.items()}
    tps, fps, skipped = [], [], Counter()
    for path in sorted((checkout / "cmd/generate/config/rules").glob("*.go")):
        source = path.read_text()
        for _, body in functions(source):
            ids = re.findall(r'RuleID:\s*"([^"]+)"', body)
            if not ids or ids[0] not in rules:
                continue
            rid = ids[0]
            ev = Evaluator(tokens(body))
            ev.run()
            for found_tps, found_fps in ev.validated:
                items = found_tps.values() if isinstance(found_tps, dict) else found_tps or []
                for tp in (t for t in items if isinstance(t, str)):
                    secret = secret_of(rules[rid], compiled[rid], tp)
                    if secret:
                        tps.append({"rule": rid, "text": tp, "secret": secret})
                    else:
                        skipped[rid] += 1
                items = found_fps.values() if isinstance(found_fps, dict) else found_fps or []
                fps.extend({"rule": rid, "text": fp} for fp in items if isinstance(fp, str))
            if not ev.validated:
                skipped[rid + " (not evaluated)"] += 1
    print(f"{len(tps)} tps over {len({t['rule'] for t in tps})} rules, {len(fps)} fps")
    print("skipped:", dict(skipped))
    write(HERE / "gitleaks_tps.json", tps)
    write(HERE / "gitleaks_fps.json", fps)
    bare = bare_tokens(tps, rules, compiled)
    print(f"{len(bare)} bare tokens of {len({b['service'] for b in bare})} services")
    write(HERE / "bare_tokens.json", bare)
    write(HERE / "control.json", control())
    return 0


def write(path: Path, items: list) -> None:
    path.write_text(json.dumps(items, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    sys.exit(main())
