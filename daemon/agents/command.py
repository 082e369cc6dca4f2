"""The `command` adapter: any argv, `{prompt}` replaced by the prompt, else the prompt on stdin."""

from __future__ import annotations

from daemon.agents.base import AgentAdapter, AgentEvent, Invocation, Resume


class CommandAdapter(AgentAdapter):
    """Runs the profile's `command`; a nudge is a new process with the whole prompt."""

    name = "command"

    def invocation(self, prompt: str, resume: Resume | None = None) -> Invocation:
        # A command agent has no session: the caller passes the whole prompt, nudge included.
        argv = list(self.profile.command) + list(self.profile.args)
        # The key keeps the name the profile gives it: a command reads what it reads.
        env = {self.profile.api_key_env: self.api_key()} if self.profile.api_key_env else {}
        if any("{prompt}" in part for part in argv):
            return Invocation(
                argv=[part.replace("{prompt}", prompt) for part in argv],
                env=env,
                home=self.home(),
            )
        return Invocation(argv=argv, stdin=prompt.encode("utf-8"), env=env, home=self.home())

    def parse_line(self, line: str) -> list[AgentEvent]:
        return [AgentEvent(type="text", text=line)]
