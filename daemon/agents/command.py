"""The `command` adapter: any argv, `{prompt}` replaced by the prompt, else the prompt on stdin."""

from __future__ import annotations

from daemon.agents.base import AgentAdapter, AgentEvent, Invocation, Resume


class CommandAdapter(AgentAdapter):
    """Runs the profile's `command`; a nudge is a new process with the whole prompt."""

    name = "command"

    def invocation(self, prompt: str, resume: Resume | None = None) -> Invocation:
        # A command agent has no session: the caller passes the whole prompt, nudge included.
        argv = list(self.profile.command) + list(self.profile.args)
        if any("{prompt}" in part for part in argv):
            return Invocation(
                argv=[part.replace("{prompt}", prompt) for part in argv], home=self.home()
            )
        return Invocation(argv=argv, stdin=prompt.encode("utf-8"), home=self.home())

    def parse_line(self, line: str) -> list[AgentEvent]:
        return [AgentEvent(type="text", text=line)]
