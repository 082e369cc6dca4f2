"""A landing's conflict attempt on both engines, the run records compared field by field.

The agent fixes calc.py and waits; the person changes the same line on `main` meanwhile; the
landing conflicts and the agent, given the merge with its markers, keeps its side. On the
local engine the conflict attempt runs in the run's tree; on Temporal the home's finish
activity runs it (the landing queue is the home's), in the run's tree made again there when
it is gone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers import git, wait_for
from tests.machines import Machine
from tests.test_engines import make_machine, script_agent
from tests.test_parity import machines, on_both

__all__ = ["machines"]  # a fixture, imported for pytest

AGENT = """\
import pathlib, sys, time
talk = pathlib.Path({talk!r})
p = pathlib.Path('calc.py')
text = p.read_text()
if '<<<<<<< ' in text:
    out, keep = [], True
    for line in text.splitlines(True):
        if line.startswith(('<<<<<<< ', '>>>>>>> ')):
            keep = True
        elif line.startswith('======='):
            keep = False
        elif keep:
            out.append(line)
    p.write_text(''.join(out))
    sys.exit(0)
p.write_text(text.replace('a - b', 'a + b'))
(talk / 'started').write_text('')
while not (talk / 'go').exists(): time.sleep(0.05)
"""


def setup(folder: Path, engine: str) -> Machine:
    talk = folder / "talk"
    talk.mkdir(parents=True)
    agent = script_agent(AGENT.format(talk=str(talk)))
    config = f'\n[sandbox]\nwritable = ["{talk}"]\n'
    return make_machine(folder, engine, agent, config, land="merge")


def test_a_conflict_the_agent_resolves_is_recorded_alike(
    tmp_path: Path, temporal: Any, machines: list
) -> None:
    def scenario(machine: Machine) -> int:
        talk = machine.root.parent / "talk"
        machine.start("run")
        assert machine.loopd("trigger", "calc").returncode == 0
        wait_for(lambda: (talk / "started").exists(), timeout=120, what="the agent's fix")
        calc = machine.repo / "calc.py"
        calc.write_text(calc.read_text().replace("a - b", "a - b  # the person's"))
        git(machine.repo, "commit", "-qam", "person: calc.py")
        (talk / "go").write_text("")
        return 1

    (run,) = on_both(tmp_path, temporal, machines, setup, scenario)
    assert run["outcome"] == "succeeded" and run["landed"] is True, run
    first, second = run["attempts"]
    assert not first.get("conflict") and second["conflict"].startswith("main at ")
    assert "calc.py (lines 2-" in second["conflict"]
    for machine in machines:
        landed = git(machine.repo, "show", "main:calc.py")
        assert "a + b" in landed and "<<<<<<<" not in landed
