"""End to end: an agent prints the labelled secrets; nothing of them reaches state/ or the judge.

A `command` agent prints every example secret of gitleaks' rule tests and every bare provider
token of tests/data/redaction/, each inside an ordinary sentence, writes some of them into a
file it commits, and ends with a summary naming more. `loopd once` runs it with the scripted
critic; then every file under state/ and every request the critic received are searched.
The control set (git SHAs, checksums, uuids, test ids, lockfile hashes) must arrive verbatim.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers import file_text, loopd, make_home, make_repo
from tests.model_server import ScriptedModelServer

DATA = Path(__file__).parent / "data" / "redaction"
TARGET = 0.98
TASK_TOKEN = "glpat-" + "Zq3vX9kL2mN8pR4tW7yB"  # in the loop's task: run.toml keeps it out

AGENT = """
import json, pathlib, sys
data = json.loads(pathlib.Path(sys.argv[1]).read_text())
for text in data["texts"]:
    print(f"While fixing the build I saw {text} in the output, so I kept going.")
for line in data["control"]:
    print(line)
pathlib.Path("notes.txt").write_text("\\n".join(data["file"]) + "\\n")
p = pathlib.Path("calc.py"); p.write_text(p.read_text().replace("a - b", "a + b"))
print("Fixed add() in calc.py; the keys I used were " + ", ".join(data["summary"]) + ".")
"""


def forms(secret: str) -> tuple[str, str]:
    """A secret as written in a plain file and inside a JSON string."""
    return secret, json.dumps(secret)[1:-1]


def leaked(secret: str, where: str) -> bool:
    return any(form in where for form in forms(secret))


@pytest.fixture
def server(model_server: ScriptedModelServer) -> ScriptedModelServer:
    model_server.default = {"status": 404, "message": "not scripted in this test"}
    return model_server


def test_labelled_secrets_stay_out_of_state_and_the_judge(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    tps = json.loads((DATA / "gitleaks_tps.json").read_text())
    bare = json.loads((DATA / "bare_tokens.json").read_text())
    control = json.loads((DATA / "control.json").read_text())
    control_lines = [line for item in control for line in item.split("\n")]
    payload = {
        "texts": [t["text"] for t in tps] + [b["secret"] for b in bare],
        "control": control_lines,
        "file": [t["text"] for t in tps[::50]],
        "summary": [b["secret"] for b in bare[::40]],
    }
    (tmp_path / "secrets.json").write_text(json.dumps(payload))
    repo = make_repo(tmp_path / "repo", {"calc.py": "def add(a, b):\n    return a - b\n"})
    argv = [sys.executable, "-c", AGENT, str(tmp_path / "secrets.json")]
    config = (
        f'[verifier]\nbase_url = "{server.base_url}"\nmodel = "critic-model"\n'
        f'timeout = "5s"\n\n[agents.printer]\nadapter = "command"\nmodel = "agent-model"\n'
        f"command = {json.dumps(argv)}\n"
    )
    loop = {
        "repo": str(repo),
        "task": f"Make add() add. Deploy with {TASK_TOKEN} when done.",
        "agent": "printer",
        "done_when": ["python3 -c 'from calc import add; assert add(2, 3) == 5'"],
        "attempt_timeout": "120s",
        "max_nudges": 0,
    }
    home = make_home(
        tmp_path / "home",
        config,
        {"calc": "".join(f"{k} = {json.dumps(v)}\n" for k, v in loop.items())},
    )
    server.add(
        {"json": {"score": 8, "verdict": "Backed.", "unsupported_claims": [], "feedback": ""}},
        name="critic_verdict",
    )
    proc = loopd(home, "once", "calc", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    files = {
        str(path.relative_to(home)): file_text(path)
        for path in sorted((home / "state").rglob("*"))
        if path.is_file()
    }
    state = "\n".join(files.values())
    assert "While fixing the build" in state  # the transcript is there to be searched
    judge = server.log_text()
    assert server.chat_requests("critic_verdict")
    for name, secrets in (
        ("gitleaks", [t["secret"] for t in tps]),
        ("bare", [b["secret"] for b in bare]),
    ):
        out = [s for s in secrets if leaked(s, state)]
        assert 1 - len(out) / len(secrets) >= TARGET, (name, len(out), out[:10])
        assert not [s for s in secrets if leaked(s, judge) and not leaked(s, state)]
    assert not leaked(TASK_TOKEN, state) and not leaked(TASK_TOKEN, judge)
    summary_leaks = [s for s in payload["summary"] if leaked(s, state) or leaked(s, judge)]
    assert summary_leaks == []
    transcripts = "\n".join(text for name, text in files.items() if "transcript" in name)
    altered = [line for line in control_lines if json.dumps(line)[1:-1] not in transcripts]
    assert altered == []
