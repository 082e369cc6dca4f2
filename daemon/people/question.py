"""An agent's question to a person (the `ask_person` tool): an escalation of cause `question`.

`state/escalations/RUN_ID-qN.md`, beside the run's own escalation file, in the same format,
so `loopd escalations` lists it and `loopd escalations resolve RUN_ID-qN` answers it. The run
goes on: the question asks nothing of the run's outcome.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from daemon.people.escalation import write_question
from daemon.state.records import RunRecord
from daemon.state.store import StateStore

QUESTIONS_PER_RUN = 20


class TooManyQuestions(Exception):
    """The run asked as many questions as loopd files for one run."""


def file_question(
    store: StateStore, run: RunRecord, question: str, attempt: int, now: datetime
) -> Path:
    """Write the next `RUN_ID-qN.md` for `question`; TooManyQuestions past QUESTIONS_PER_RUN."""
    for n in range(1, QUESTIONS_PER_RUN + 1):
        path = store.escalation_path(f"{run.id}-q{n}")
        if not path.exists():
            write_question(store, path, run, question, attempt, now)
            return path
    raise TooManyQuestions(f"a run asks at most {QUESTIONS_PER_RUN} questions")
