"""The example agent: a deterministic stand-in for a coding agent, no model needed.

loopd starts it as a `command` agent in the run's working tree, with the prompt on stdin.
Like a hasty agent it runs the tests, fixes the first failure it recognises, and stops,
saying it is done. loopd's checks then still fail, so loopd nudges it with their output;
the next session fixes what is left. It writes only in its working tree (the current
folder) and reads nothing but the prompt and that tree.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# The failures it knows, in the order it fixes them: test name -> (file, wrong, right).
FIXES = {
    "test_add": ("calc.py", "return a - b", "return a + b"),
    "test_mean_of_nothing": (
        "calc.py",
        "return sum(values) / len(values)",
        "return sum(values) / len(values) if values else 0.0",
    ),
}


def say(text: str) -> None:
    print(text, flush=True)


def failing_tests() -> list[str]:
    """Run the tests in the working tree; the names of those that fail."""
    say("$ python3 -m unittest")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "unittest"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    for line in lines[-6:]:
        say(f"  {line}")
    return [name for name in FIXES if f"{name} " in proc.stderr or f"{name}(" in proc.stderr]


def main() -> int:
    prompt = sys.stdin.read()
    first_line = next((ln for ln in prompt.splitlines() if ln and not ln.startswith("#")), "")
    say(f"Task: {first_line.strip()}")
    if "# Nudge" in prompt:
        say("loopd says the checks still fail; looking again.")
    failing = failing_tests()
    if not failing:
        say("All tests pass; nothing to change.")
        return 0
    name = failing[0]
    path, wrong, right = FIXES[name]
    source = Path(path)
    text = source.read_text(encoding="utf-8")
    if wrong not in text:
        say(f"{name} fails, but {path} does not hold the line I know how to fix; stopping.")
        return 1
    source.write_text(text.replace(wrong, right, 1), encoding="utf-8")
    say(f"Edited {path}: `{wrong}` -> `{right}` (fixes {name}).")
    # A hasty agent: one fix, then it declares victory without running the tests again.
    say("Done: the failing test is fixed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
