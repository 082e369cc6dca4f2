"""The `aider` adapter: plain text out; a follow-up restores the chat history."""

from __future__ import annotations

import re

from daemon.agents.base import AgentAdapter, AgentEvent, Invocation, Resume, positional

# "Tokens: 4.4k sent, 207 received. Cost: $0.0034 message, $0.0034 session." (older releases
# say "request" for "message", and may list cache writes and hits between the two counts).
_TOKENS = re.compile(
    r"^Tokens:\s*(?P<sent>[\d.,]+[kKmM]?)\s+sent,.*?(?P<received>[\d.,]+[kKmM]?)\s+received\."
    r"(?:\s*Cost:\s*\$(?P<cost>[\d.,]+)\s+(?:message|request))?"
)
# Only litellm's own errors: aider echoes the model's text, which may quote any traceback.
_ERROR = re.compile(r"^litellm\.\w*Error\b")

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


def _count(text: str) -> int:
    """Aider's rounded counts: "1,234", "4.4k", "1.2M"."""
    text = text.replace(",", "")
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:].lower(), 1)
    try:
        return int(float(text.rstrip("kKmM")) * scale)
    except ValueError:
        return 0


class AiderAdapter(AgentAdapter):
    """Aider with one message and every question answered yes; no structured stream.

    Usage comes from aider's own "Tokens: ... sent, ... received. Cost: ..." line, rounded as
    aider prints it (4.4k). A follow-up is a new process that restores the chat history, so it
    needs no session id.
    """

    name = "aider"
    structured_stream = False
    session_resume = True
    resume_needs_id = False
    usage = True
    tool_calls = False
    login_files = (".aider/oauth-keys.env",)  # the key an OpenRouter login leaves
    config_paths = (".aider/",)

    def invocation(self, prompt: str, resume: Resume | None = None) -> Invocation:
        argv = ["aider", "--message", positional(resume.message if resume else prompt)]
        argv += ["--yes-always", "--no-pretty", "--no-check-update"]
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
        env: dict[str, str] = {}  # the profile's env is added by the caller
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
        match = _TOKENS.match(line.strip())
        if match:
            cost = (match.group("cost") or "0").replace(",", "")
            return [
                AgentEvent(
                    type="usage",
                    input_tokens=_count(match.group("sent")),
                    output_tokens=_count(match.group("received")),
                    cost_usd=float(cost) if cost.replace(".", "", 1).isdigit() else 0.0,
                )
            ]
        if _ERROR.match(line.strip()):
            return [AgentEvent(type="error", text=line)]
        return [AgentEvent(type="text", text=line)]
