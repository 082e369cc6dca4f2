"""`loopd worker`: run attempts for the home that owns the engine, on this machine."""

from __future__ import annotations

import argparse
import sys

from pydantic import ValidationError

from daemon.allocator import limit_arenas
from daemon.cli.common import CommandError, home_of
from daemon.config import QUEUE_NAME, ListenConfig
from daemon.engine import engine_for
from daemon.service.context import ConfigFatal
from daemon.state.lock import LockHeld


def worker(args: argparse.Namespace) -> int:
    """Run attempts of the loops whose runs_on names --queue (default: the default queue)."""
    if args.queue and not QUEUE_NAME.match(args.queue):
        raise CommandError(f"--queue {args.queue!r}: use letters, digits, '-', '_' and '.'")
    if args.metrics:
        try:
            ListenConfig(worker_bind=args.metrics)
        except ValidationError:
            raise CommandError(
                f'--metrics {args.metrics!r} is not HOST:PORT, e.g. "127.0.0.1:9464"'
            ) from None
    home = home_of(args)
    limit_arenas()  # a worker's process runs for weeks, an attempt's thread at a time
    try:
        return engine_for(home).work(args.queue, args.metrics)
    except ConfigFatal as exc:
        print(f"loopd: configuration error, not starting:\n{exc}", file=sys.stderr)
        return 2
    except LockHeld as exc:
        raise CommandError(f"a loopd worker (pid {exc.pid}) runs for this home already") from None
