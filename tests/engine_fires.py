"""When the Temporal engine's schedules for a loop fire: `python -m tests.engine_fires ADDRESS
NAMESPACE JSON` prints the fire times (JSON), JSON being {"crons", "timezone", "start", "end"}.

Run as a child process: the test process never holds a Temporal client of its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from datetime import datetime


async def fire_times(address: str, namespace: str, case: dict) -> list[str]:
    from pathlib import Path

    from daemon.config import EngineConfig, LoopConfig
    from daemon.engine.temporal import schedules
    from daemon.engine.temporal.connect import connect

    engine = EngineConfig(kind="temporal", address=address, namespace=namespace)
    client = await connect(engine, Path("."), "tests")
    config = LoopConfig(
        repo=".", task="t", schedule=case["crons"], timezone=case["timezone"], catch_up="1h"
    )
    start, end = datetime.fromisoformat(case["start"]), datetime.fromisoformat(case["end"])
    tag = uuid.uuid4().hex[:8]
    ids = (f"dst-{tag}", f"dst-{tag}/dst")
    made = await schedules.put_loop_schedules(
        client, "dst", config, "loopd", start, end, ids=ids, paused=True
    )
    try:
        fires = await schedules.fire_times(client, "dst", config, start, end, made)
    finally:
        for sid in ids:
            await schedules.delete(client, sid)
    return [f.isoformat() for f in fires if start < f <= end]


if __name__ == "__main__":
    out = asyncio.run(fire_times(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))
    print(json.dumps(out))
    sys.stdout.flush()
    os._exit(0)
