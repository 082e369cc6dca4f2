"""An attempt's transcript is kept compressed from the attempt's end; `loopd logs`, the
critic's evidence and the rules' grounding read it as before, under the same name."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from daemon.home import Home
from daemon.model.evidence import build_evidence
from daemon.rules.grounding import EvidenceSet, quote_in_file
from daemon.service.statecap import compress_finished
from tests.helpers import loopd, make_home, make_repo
from tests.test_spine import BUGGY, agent_config, loop_file

# An agent that prints a lot: most of a transcript's bytes are its JSON bookkeeping.
CHATTY = (
    "import sys\n"
    "for i in range(20000):\n"
    "    print(f'step {i}: looked at calc.py and changed nothing')\n"
    "print('FINAL: the quote the rule cites')\n"
)


def test_a_transcript_is_compressed_when_its_attempt_ends_and_read_as_before(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    loop = loop_file(repo, max_attempts=1, max_nudges=0)
    root = make_home(tmp_path / "home", agent_config(CHATTY), {"calc": loop})
    proc = loopd(root, "once", "calc", "--reason", "test", timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run_id = proc.stdout.splitlines()[0]
    store = Home(root).state()
    attempt = store.run_dir(run_id) / "attempt-1"
    plain = attempt / "transcript.jsonl"
    packed = attempt / "transcript.jsonl.gz"
    # Compressed as the attempt ended, not an hour later by the housekeeper.
    assert packed.is_file() and not plain.exists()

    def views() -> tuple[str, str, str, list[str]]:
        logs = loopd(root, "logs", run_id, "--full").stdout
        as_json = loopd(root, "logs", run_id, "--json").stdout
        evidence = build_evidence(attempt, "task", "summary", 4000).render()
        grounded = EvidenceSet.from_dir(attempt)
        return logs, as_json, evidence, sorted(grounded.files)

    compressed = views()
    assert "transcript.jsonl" in compressed[3]
    assert "FINAL: the quote the rule cites" in compressed[0]
    assert "FINAL: the quote the rule cites" in compressed[2]  # the critic's evidence
    assert json.loads(compressed[1].splitlines()[-1])["attempt"] == 1
    assert quote_in_file(plain, "FINAL: the quote the rule cites")

    # A transcript left plain (an attempt a kill -9 ended) is compressed by the housekeeper.
    plain.write_bytes(gzip.decompress(packed.read_bytes()))
    packed.unlink()
    size = plain.stat().st_size
    assert views() == compressed  # the plain form reads the same
    # A live run's transcript is being written: left alone.
    (store.root / "live").mkdir(exist_ok=True)
    (store.root / "live" / run_id).write_text("")
    assert compress_finished(store) == (0, 0)
    (store.root / "live" / run_id).unlink()

    files, saved = compress_finished(store)
    assert files == 1 and not plain.exists() and packed.exists()
    assert packed.stat().st_size * 10 < size and saved == size - packed.stat().st_size
    assert views() == compressed
    assert compress_finished(store) == (0, 0)  # done once
