"""The local engine: every trigger, run and attempt inside this home's `loopd run` process."""

from __future__ import annotations

from daemon.engine.base import Engine


class LocalEngine(Engine):
    """Today's daemon (daemon/daemon.py); the commands read the home's own state/."""

    kind = "local"

    def serve(self) -> int:
        from daemon.daemon import run_daemon

        return run_daemon(self.home)
