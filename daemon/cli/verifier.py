"""`loopd verifier --test`: ask the verifier for its models now and say what to fix."""

from __future__ import annotations

import argparse

from daemon.cli.common import CommandError, tested_home
from daemon.cli.jsonout import print_json
from daemon.model.probe import probe_verifier


def verifier_cmd(args: argparse.Namespace) -> int:
    """Try [verifier] now (--test): does base_url list its models and the configured model?"""
    home, loaded = tested_home(
        args, "loopd verifier --test", "asks [verifier] base_url for its models"
    )
    config = loaded.daemon.verifier
    if not config.configured:
        raise CommandError(
            f"{home.config_path}: [verifier] has no base_url, so attempts are judged by their "
            'checks alone. Fix: add base_url = "http://127.0.0.1:8000/v1" (your model server) '
            "under [verifier]"
        )
    probe = probe_verifier(config, str(home.config_path))
    if args.json:
        print_json(probe.model_dump())
    else:
        print(probe.text if probe.ok else f"FAILED: {probe.text}")
    return 0 if probe.ok else 1
