"""The `aider` adapter: plain text out; a follow-up restores the chat history."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from daemon.agents.base import AgentAdapter, AgentEvent, Invocation, Resume, positional
from daemon.config import AgentProfile

# "Tokens: 4.4k sent, 207 received. Cost: $0.0034 message, $0.0034 session." (older releases
# say "request" for "message", and may list cache writes and hits between the two counts).
_TOKENS = re.compile(
    r"^Tokens:\s*(?P<sent>[\d.,]+[kKmM]?)\s+sent,.*?(?P<received>[\d.,]+[kKmM]?)\s+received\."
    r"(?:\s*Cost:\s*\$(?P<cost>[\d.,]+)\s+(?:message|request))?"
)
# Only litellm's own errors: aider echoes the model's text, which may quote any traceback.
_ERROR = re.compile(r"^litellm\.(?P<kind>\w*Error)\b")
# aider/exceptions.py: a refused key is not retried; a rate limit is, for about a minute.
_LOGIN_ERRORS = {"AuthenticationError", "PermissionDeniedError"}
_LIMIT_ERRORS = {"RateLimitError", "RouterRateLimitError"}
# "Retrying in 2.0 seconds..." (aider/coders/base_coder.py, the wait doubling from 0.25 s).
_RETRY = re.compile(r"^Retrying in (?P<seconds>[\d.]+) seconds\.\.\.$")
# aider retries a rate limit for a minute (RETRY_TIMEOUT, no flag or variable sets it): loopd
# ends it once aider says it will wait this long, after about two seconds of retries.
RETRY_CAP = 2.0
# The announcements aider prints before the message goes out (Coder.get_announcements, and
# main.py's notes after them); the model's answer starts after them.
_BANNER = re.compile(
    r"^(?:Aider v\d|Main model:|Model:|Editor model:|Weak model:|Git repo:|Repo-map:"
    r"|Added .+ to the chat|Restored previous conversation history|Multiline mode:|See: "
    r"|Warning: For large repos|Note: in-chat filenames|Cur working dir:|Git working dir:"
    r"|Cost estimates may be inaccurate)"
)
# What aider prints of its own after an answer (applying the edits, reflecting on a failure).
_AFTER = re.compile(
    r"^(?:Applied edit to |Did not apply edit to |Commit [0-9a-f]{7}|Only \d+ reflections allowed"
    r"|The LLM did not conform to the edit format|Allow edits to file|Creating empty file )"
)
_FENCE = re.compile(r"^\s*(?:```|~~~)")

# The variable litellm reads a provider's key from, by model prefix; OpenAI's otherwise.
_KEY_VARS = {
    "anthropic": "ANTHROPIC_API_KEY",
    "claude": "ANTHROPIC_API_KEY",
    "gemini": "GEMINI_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
    "groq": "GROQ_API_KEY",
    "mistral": "MISTRAL_API_KEY",
    "xai": "XAI_API_KEY",
}

# aider downloads litellm's price list into ~/.aider/caches at a start that finds no fresh
# copy there (aider/models.py, ModelInfoManager); a run's HOME never has one. A cache that
# names no model makes aider ask litellm, which reads its own bundled copy
# (LITELLM_LOCAL_MODEL_COST_MAP) instead of the network.
PRICE_CACHE = ".aider/caches/model_prices_and_context_window.json"
PRICE_CACHE_TEXT = '{"loopd": "prices come from litellm\'s bundled copy"}\n'
# Read from HOME by aider (.aider.model.settings.yml); "aider/extra_params" applies to every
# model. No retries inside the OpenAI client: aider's own loop retries, and loopd caps that.
MODEL_SETTINGS = ".aider.model.settings.yml"
MODEL_SETTINGS_TEXT = "- name: aider/extra_params\n  extra_params:\n    max_retries: 0\n"


def _count(text: str) -> int:
    """Aider's rounded counts: "1,234", "4.4k", "1.2M"."""
    text = text.replace(",", "")
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:].lower(), 1)
    try:
        return int(float(text.rstrip("kKmM")) * scale)
    except ValueError:
        return 0


def answer_of(lines: list[str]) -> str:
    """The model's answer among the lines printed since the last of aider's own.

    Before an answer aider may ask to add the files a message names: a blank line and the
    file's name, each (io.confirm_ask's subject); a name followed by a fence is the answer's
    own edit block.
    """
    rest = [line for line in lines if not _AFTER.match(line)]
    while rest:
        while rest and not rest[0].strip():
            rest.pop(0)
        subject = rest and len(rest[0].split()) == 1 and not _FENCE.match(rest[0])
        if subject and not (len(rest) > 1 and _FENCE.match(rest[1])):
            rest.pop(0)
            continue
        break
    return "\n".join(rest).strip()


class AiderAdapter(AgentAdapter):
    """Aider with one message and every question answered yes; no structured stream.

    Usage comes from aider's own "Tokens: ... sent, ... received. Cost: ..." line, rounded as
    aider prints it (4.4k); the model's answer, streamed before it, is the session's `final`.
    A follow-up is a new process that restores the chat history, so it needs no session id.
    """

    name = "aider"
    structured_stream = False
    session_resume = True
    resume_needs_id = False
    usage = True
    tool_calls = False
    stop_at_limit = True  # it would retry a rate limit for a minute on its own
    login_files = (".aider/oauth-keys.env",)  # the key an OpenRouter login leaves
    config_paths = (".aider/",)
    # The repo map's tags cache (a SQLite file, TAGS_CACHE_DIR in aider/repomap.py), written
    # at the top of the tree; with --no-gitignore aider does not ignore it itself.
    tree_litter = ("/.aider.tags.cache.v*/",)

    def __init__(
        self,
        profile: AgentProfile,
        private_home: Path | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(profile, private_home, environ)
        self._reset()

    def _reset(self) -> None:
        """A new process: its banner first, then answers."""
        self._phase = "start"  # start | banner | answer
        self._lines: list[str] = []
        self._limit = ""  # the last rate-limit error line, while aider retries it

    def invocation(self, prompt: str, resume: Resume | None = None) -> Invocation:
        self._reset()
        argv = ["aider", "--message", positional(resume.message if resume else prompt)]
        argv += ["--yes-always", "--no-pretty", "--no-check-update", "--no-show-release-notes"]
        # No analytics, no model warnings (a local model is unknown to litellm), no URL offers.
        argv += ["--no-analytics", "--no-show-model-warnings", "--no-detect-urls"]
        # loopd commits what the agent leaves, and the user's .gitignore is not the agent's to edit.
        argv += ["--no-auto-commits", "--no-gitignore"]
        if resume:
            argv.append("--restore-chat-history")
        home = self.home()
        keep = home or self.scratch
        if keep is not None:
            # The chat history must outlive one process for the follow-up; keep it out of the tree.
            argv += ["--chat-history-file", str(keep / ".aider.chat.history.md")]
            argv += ["--input-history-file", str(keep / ".aider.input.history")]
        if home is not None:
            _quiet_home(home)
        # Rich wraps aider's console at 80 columns without a terminal: one line per line. Its
        # history summarizer reports errors and retries with print(), buffered into a pipe:
        # unbuffered, they reach loopd as they happen instead of looking like silence.
        env: dict[str, str] = {
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "COLUMNS": "100000",
            "PYTHONUNBUFFERED": "1",
        }
        model = self.profile.model
        key = self.api_key()
        if self.profile.base_url:
            argv += ["--openai-api-base", self.profile.base_url]
            # litellm routes an "openai/" model to the OpenAI-compatible base.
            if model and not model.startswith("openai/"):
                model = f"openai/{model}"
            env["OPENAI_API_KEY"] = key or "loopd-no-key"
        elif key:
            prefix = model.split("/", 1)[0].split("-", 1)[0].lower() if model else ""
            env[_KEY_VARS.get(prefix, "OPENAI_API_KEY")] = key
        if model:
            argv += ["--model", model]
        argv += list(self.profile.args)
        return Invocation(argv=argv, env=env, home=home)

    def parse_line(self, line: str) -> list[AgentEvent]:
        stripped = line.strip()
        match = _TOKENS.match(stripped)
        if match:
            return self._answered(match)
        error = _ERROR.match(stripped)
        if error:
            return self._error(error.group("kind"), line)
        retry = _RETRY.match(stripped)
        if retry and self._limit and float(retry.group("seconds")) >= RETRY_CAP:
            return [AgentEvent(type="text", text=line), *self._limit_events()]
        self._follow(line)
        return [AgentEvent(type="text", text=line)]

    def _follow(self, line: str) -> None:
        """Keep the lines that may be the answer: those after the banner."""
        if self._phase != "answer" and _BANNER.match(line.strip()):
            self._phase = "banner"
            return
        if self._phase == "banner" and line.strip():
            self._phase = "answer"
        if self._phase == "banner":
            return  # the blank line aider prints before the message goes out
        if self._phase == "answer":
            self._lines.append(line)

    def _answered(self, match: re.Match[str]) -> list[AgentEvent]:
        """aider's tokens line ends an answer: the usage, and the answer as the session's final."""
        cost = (match.group("cost") or "0").replace(",", "")
        usage = AgentEvent(
            type="usage",
            input_tokens=_count(match.group("sent")),
            output_tokens=_count(match.group("received")),
            cost_usd=float(cost) if cost.replace(".", "", 1).isdigit() else 0.0,
        )
        answer = answer_of(self._lines)
        self._lines, self._limit, self._phase = [], "", "answer"
        return [usage, AgentEvent(type="final", text=answer)] if answer else [usage]

    def _error(self, kind: str, line: str) -> list[AgentEvent]:
        """One of litellm's errors: a refused key, a rate limit, or any other."""
        self._lines = []
        if kind in _LOGIN_ERRORS:
            # Not retried: aider offers the error's URLs and exits 0. The error is the summary.
            return [
                AgentEvent(type="error", text=line, login=True),
                AgentEvent(type="final", text=line, is_error=True),
            ]
        if kind in _LIMIT_ERRORS:
            self._limit = line
        return [AgentEvent(type="error", text=line)]

    def _limit_events(self) -> list[AgentEvent]:
        """aider keeps retrying the rate limit: a usage limit, and loopd ends the process."""
        text, self._limit = self._limit, ""
        return [
            AgentEvent(type="error", text=text, quota=True),
            AgentEvent(type="final", text=text, is_error=True),
        ]


def _quiet_home(home: Path) -> None:
    """Seed the run's HOME so aider starts without reaching the network, retrying only once."""
    for rel, text in ((PRICE_CACHE, PRICE_CACHE_TEXT), (MODEL_SETTINGS, MODEL_SETTINGS_TEXT)):
        path = home / rel
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            # Written again at each start: aider reads the cache only while it is a day old.
            path.write_text(text)
        except OSError:
            continue  # aider then fetches the list or retries more: slower, not wrong
