"""`loopd init`'s loopd.toml shows every `[limits]` key, commented, with its default."""

from __future__ import annotations

import re
import tomllib

from daemon.config import LimitsConfig
from daemon.home import EXAMPLE_CONFIG


def test_every_limits_key_is_shown_with_its_default() -> None:
    block = EXAMPLE_CONFIG.split("\n[limits]\n", 1)[1].split("\n\n", 1)[0]
    shown = {}
    for line in block.splitlines():
        match = re.match(r"^(?:# )?([a-z_]+) = (.*?)(?:\s+#.*)?$", line)
        if match:
            shown[match[1]] = tomllib.loads(f"v = {match[2]}")["v"]
    assert set(shown) == set(LimitsConfig.model_fields)
    written = LimitsConfig.model_validate(shown)
    assert written == LimitsConfig(), "a value shown is not the default"
    assert {"max_wait", "daily_tokens", "timezone"} <= set(shown)
