"""The `qwen` adapter (Qwen Code), on an OpenAI-compatible endpoint."""

from __future__ import annotations

from pathlib import Path

from daemon.agents.base import AgentAdapter, AgentEvent, Invocation, Resume, positional
from daemon.agents.claude import PLACEHOLDER_KEY, parse_stream_json
from daemon.agents.deskconfig import merge_settings


class QwenAdapter(AgentAdapter):
    """Qwen Code headless with stream-json output (Claude Code's format); resumes by session id."""

    name = "qwen"
    structured_stream = True
    session_resume = True
    usage = True
    tool_calls = True
    login_files = (".qwen/oauth_creds.json",)  # Qwen OAuth; loopd itself starts it with a key
    credential_files = (".qwen/oauth_creds.json",)
    config_paths = (".qwen/",)
    speaks_mcp = True

    def write_tool_config(self, home: Path) -> None:
        if self.desk is not None:
            # Declared to the model at the start, not behind Qwen Code's tool_search bridge.
            merge_settings(home / ".qwen" / "settings.json", self.desk, alwaysLoadTools=True)

    def invocation(self, prompt: str, resume: Resume | None = None) -> Invocation:
        argv = ["qwen", "--output-format", "stream-json", "--approval-mode", "yolo"]
        argv += ["--auth-type", "openai"]
        if self.profile.base_url:
            argv += ["--openai-base-url", self.profile.base_url]
        if self.profile.model:
            argv += ["-m", self.profile.model]
        argv += list(self.profile.args)
        if resume:
            argv += ["--resume", resume.session_id]
        argv.append(positional(resume.message if resume else prompt))
        env: dict[str, str] = {}  # the profile's env is added by the caller
        # Qwen Code 0.24 ends at once ("Missing API key for OpenAI-compatible auth") without a key,
        # even for a keyless local server, so such a server gets a placeholder.
        key = self.api_key()
        if key:
            env["OPENAI_API_KEY"] = key
        elif self.profile.base_url:
            env["OPENAI_API_KEY"] = PLACEHOLDER_KEY
        # The yolo notice on stderr says what loopd already knows.
        env["QWEN_CODE_SUPPRESS_YOLO_WARNING"] = "1"
        return Invocation(argv=argv, env=env, home=self.home())

    def parse_line(self, line: str) -> list[AgentEvent]:
        return parse_stream_json(line, cache_is_extra=False)
