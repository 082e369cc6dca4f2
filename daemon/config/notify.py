"""`[notify]` of loopd.toml: a command, a webhook, apprise URLs and notifier plugins."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from daemon.config.base import StrictModel, _argv, _http_url
from daemon.plugins import NOTIFIERS, installed_here, is_installed, is_own, names

# loopd's own notifiers, by the `[notify]` key that sets each.
OWN_KEYS = {"command": "command", "webhook": "webhook", "apprise": "urls"}


class NotifyConfig(StrictModel):
    command: list[str] = Field(
        [],
        examples=[["notify-send", "loopd"]],
        description=(
            "a program run with the message appended as its last argument, e.g. "
            '`["notify-send", "loopd"]`; argv, never a shell'
        ),
        json_schema_extra={"allowed": "non-empty strings"},
    )
    webhook: str = Field(
        "",
        examples=["https://hooks.example.com/loopd"],
        description=(
            'a POST of the notification as JSON (`{"text": ..., ...}`), retried with backoff'
        ),
        json_schema_extra={"allowed": "an `http://` or `https://` URL with a host"},
    )
    urls: list[str] = Field(
        [],
        examples=[["ntfy://ntfy.sh/my-loopd-topic"]],
        description=(
            "each notification also through "
            "[apprise](https://github.com/caronc/apprise/wiki), one URL per service, "
            'e.g. `["ntfy://ntfy.sh/my-topic", "mailtos://user:pass@example.com"]`: '
            "the same message text, titled `loopd: KIND`, an escalation's file linked"
            " below it (`file://...`). Needs the `notify` extra (`.venv/bin/pip install -e "
            "'.[notify]'` in loopd's checkout); without it `loopd run` stops with exit 2 saying so"
        ),
        json_schema_extra={"allowed": "apprise URLs (`SCHEME://...`)"},
    )

    @field_validator("urls")
    @classmethod
    def _apprise_urls(cls, value: list[str]) -> list[str]:
        for url in value:
            if "://" not in url or any(c.isspace() or ord(c) < 32 for c in url):
                raise ValueError(f"{url!r} is not an apprise URL such as ntfy://ntfy.sh/TOPIC")
        return value

    plugins: dict[str, dict[str, Any]] = Field(
        {},
        examples=[{"tofile": {"path": "/var/log/loopd-notes.jsonl"}}],
        description=(
            "notifiers that installed packages register in the `loopd.notifiers` entry-point "
            "group, by name, each with its own options table (`[notify.plugins.NAME]`): "
            "every notification also through each ([adapters.md](adapters.md))"
        ),
        json_schema_extra={"allowed": "names of installed notifier plugins, each a table"},
    )

    @field_validator("plugins")
    @classmethod
    def _installed(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name in value:
            if is_own(NOTIFIERS, name):
                raise ValueError(
                    f"{name!r} is loopd's own notifier. Fix: set it with `[notify] "
                    f"{OWN_KEYS.get(name, name)}` and remove [notify.plugins.{name}]"
                )
            if not is_installed(NOTIFIERS, name):
                others = [n for n in names(NOTIFIERS) if not is_own(NOTIFIERS, n)]
                raise ValueError(
                    f"no notifier plugin {name!r} is installed (installed: "
                    f"{', '.join(others) or 'none'}"
                    f"). Fix: install the package that registers {name!r} in the "
                    f"'loopd.notifiers' entry-point group into loopd's environment "
                    f"({installed_here()}), or remove [notify.plugins.{name}]"
                )
        return value

    _command_argv = field_validator("command")(_argv)
    _webhook_url = field_validator("webhook")(_http_url)
