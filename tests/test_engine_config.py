"""`[engine]` and `runs_on`: validation, the registry, credentials, what each engine refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from daemon import config as config_module
from daemon.config import EngineConfig, LoopConfig
from daemon.engine import ENGINES, engine_for
from daemon.engine.base import EngineError
from daemon.home import Home
from tests.helpers import loopd, make_home, make_repo

TEMPORAL = '[engine]\nkind = "temporal"\naddress = "127.0.0.1:1"\n'


def test_the_registry_names_exactly_the_engines_the_configuration_allows() -> None:
    assert tuple(ENGINES) == config_module.ENGINES


@pytest.mark.parametrize(
    ("section", "words"),
    [
        ({"kind": "cloud"}, ["engine.kind", "local", "temporal"]),
        ({"address": "localhost"}, ["engine.address", "HOST:PORT"]),
        ({"address": "host:99999"}, ["engine.address"]),
        ({"task_queue": "my queue"}, ["engine.task_queue", "plain name"]),
        ({"heartbeat_timeout": "0s"}, ["engine.heartbeat_timeout", "1s to 1h"]),
        ({"namespaces": "x"}, ["namespaces"]),
    ],
)
def test_a_bad_engine_key_is_named_with_what_to_write(
    tmp_path: Path, section: dict, words: list[str]
) -> None:
    body = "[engine]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in section.items())
    home = make_home(tmp_path / "home", body)
    proc = loopd(home, "check")
    assert proc.returncode == 2
    for word in words:
        assert word in proc.stdout + proc.stderr, proc.stdout


def test_runs_on_takes_a_plain_queue_name() -> None:
    assert LoopConfig(repo=".", task="t", runs_on="gpu-2").runs_on == "gpu-2"
    with pytest.raises(ValidationError):
        LoopConfig(repo=".", task="t", runs_on="gpu/2")


def test_the_local_engine_is_the_default_and_temporal_is_chosen_by_kind(tmp_path: Path) -> None:
    local = Home(make_home(tmp_path / "a"))
    assert engine_for(local).kind == "local" and engine_for(local).control() is None
    remote = Home(make_home(tmp_path / "b", TEMPORAL))
    assert engine_for(remote).kind == "temporal" and engine_for(remote).control() is not None


def test_without_a_certificate_or_key_every_command_warns_that_agents_can_reach_the_engine(
    tmp_path: Path,
) -> None:
    home = make_home(tmp_path / "home", TEMPORAL)
    proc = loopd(home, "check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "agents with network access included" in proc.stdout
    (home / "engine").mkdir()
    (home / "engine" / "key").write_text("secret\n")
    secured = TEMPORAL + 'api_key_file = "engine/key"\n'
    (home / "loopd.toml").write_text(secured + f'[limits]\nworktrees = "{tmp_path / "wt"}"\n')
    proc = loopd(home, "check")
    assert "agents with network access" not in proc.stdout


def test_credentials_are_files_of_the_home_and_a_missing_one_is_named(tmp_path: Path) -> None:
    from daemon.engine.temporal.connect import connect_options

    home = tmp_path / "home"
    (home / "engine").mkdir(parents=True)
    (home / "engine" / "client.pem").write_bytes(b"CERT")
    (home / "engine" / "client.key").write_bytes(b"KEY")
    (home / "engine" / "api").write_text("  the-key \n")
    engine = EngineConfig(
        kind="temporal", tls_cert="engine/client.pem", tls_key="engine/client.key"
    )
    tls = connect_options(engine, home)["tls"]
    assert (tls.client_cert, tls.client_private_key, tls.server_root_ca_cert) == (
        b"CERT",
        b"KEY",
        None,
    )
    options = connect_options(EngineConfig(kind="temporal", api_key_file="engine/api"), home)
    assert options == {"api_key": "the-key", "tls": True}
    with pytest.raises(EngineError) as caught:
        connect_options(EngineConfig(kind="temporal", tls_cert="engine/x.pem", tls_key="k"), home)
    assert "engine.tls_cert" in str(caught.value) and "engine/x.pem" in str(caught.value)
    with pytest.raises(EngineError, match="go together"):
        connect_options(EngineConfig(kind="temporal", tls_cert="engine/client.pem"), home)


def test_in_place_runs_are_a_configuration_error_on_the_temporal_engine(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    loop = f'repo = "{repo}"\ntask = "t"\nisolation = "in-place"\n'
    home = make_home(tmp_path / "home", TEMPORAL, {"calc": loop})
    proc = loopd(home, "check")
    assert proc.returncode == 2
    assert "calc.toml: isolation" in proc.stdout and 'isolation = "clone"' in proc.stdout


def test_once_and_worker_say_which_engine_runs_what(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    loops = {"calc": f'repo = "{repo}"\ntask = "t"\nagent = "qwen"\n'}
    temporal = make_home(tmp_path / "t", TEMPORAL, loops)
    proc = loopd(temporal, "once", "calc")
    assert proc.returncode == 2 and "loopd trigger calc --wait" in proc.stderr
    local = make_home(tmp_path / "l", "", loops)
    proc = loopd(local, "worker")
    assert proc.returncode == 2 and 'kind = "temporal"' in proc.stderr
    proc = loopd(temporal, "worker", "--queue", "no/such")
    assert proc.returncode == 2 and "--queue" in proc.stderr


def test_an_engine_that_cannot_be_reached_is_named_with_the_fix(tmp_path: Path) -> None:
    from tests.temporal_server import free_port

    body = TEMPORAL.replace("127.0.0.1:1", f"127.0.0.1:{free_port()}")
    home = make_home(tmp_path / "home", body)
    proc = loopd(home, "status")
    assert proc.returncode == 2
    assert "cannot reach the engine at 127.0.0.1:" in proc.stderr
    assert "temporal server start-dev" in proc.stderr
