"""`state/answers/LOOP.md`: a person's answers to the questions a loop's agents asked.

An agent asks with its `ask_person` tool (people/question.py files `RUN_ID-qN.md`); a person
answers with `loopd escalations resolve RUN_ID-qN --note TEXT`. The answer is a decision about
the loop's work, so it is kept here, question and answer, and every later run of the loop is
given it in its prompt (`# Answers from a person`), as its progress notes are. The newest
answers are kept whole within ANSWERS_CAP; older ones drop off the top.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from daemon.people.escalation_text import quote
from daemon.people.terminal import clean
from daemon.redact import redact
from daemon.state.atomic import write_atomic
from daemon.state.events import iso
from daemon.state.store import StateStore

ANSWERS_CAP = 8_000  # characters of answers a prompt carries: the newest, whole
TITLE = "# Answers from a person"
INTRO = (
    "A person's answers to questions this loop's agents asked (`ask_person`), newest last. "
    "They are decisions about the work: follow them.\n"
)


def _sections(text: str) -> list[str]:
    """The `## ` sections of an answers file, each whole."""
    parts = text.split("\n## ")
    return ["## " + part.strip() + "\n" for part in parts[1:] if part.strip()]


def record_answer(
    store: StateStore, loop: str, asked_in: str, question: str, answer: str, now: datetime
) -> Path:
    """Add the answer to escalation `asked_in` (RUN_ID-qN) to the loop's answers file."""
    path = store.answers_path(loop)
    try:
        sections = _sections(path.read_text(encoding="utf-8"))
    except OSError:
        sections = []
    asked = quote(question) if question.strip() else "> (the question was not recorded)"
    sections.append(
        f"## {asked_in}, answered {iso(now)}\n\nQuestion:\n{asked}\n\nAnswer:\n{quote(answer)}\n"
    )
    while len(sections) > 1 and sum(len(s) + 1 for s in sections) > ANSWERS_CAP:
        sections.pop(0)
    text = f"{TITLE}\n\n{INTRO}\n" + "\n".join(sections)
    write_atomic(path, clean(redact(text)))  # a person's and an agent's words: no escapes
    return path


def read_answers(store: StateStore, loop: str) -> str:
    """The loop's answers for a prompt's `# Answers from a person`, without their title."""
    try:
        text = store.answers_path(loop).read_text(encoding="utf-8")
    except OSError:
        return ""
    sections = _sections(text)
    return (INTRO + "\n" + "\n".join(sections)).strip() if sections else ""


def asked(body: str) -> str:
    """The question of a question escalation's body (people/escalation.py `write_question`):
    its quoted lines under the `# The agent of run ... asks` heading."""
    lines = body.splitlines()
    out: list[str] = []
    started = False
    for line in lines:
        if line.startswith("# The agent of run "):
            started = True
            continue
        if not started:
            continue
        if line.startswith(">"):
            out.append(line[2:] if line.startswith("> ") else line[1:])
        elif out:
            break
    return "\n".join(out).strip()
