"""The read commands' plain path: `status`, `runs`, `show` and `escalations` answer from the
home's files read as plain TOML and JSON, without importing pydantic or the models (their
import alone costs more than the 100 ms these commands have).

Nothing here imports a module that imports pydantic (tests/test_plain_path.py runs each
command's plain path in a fresh interpreter and checks). Where a plain reading cannot be
sure it says what the models would (a file it cannot read, an engine other than the local
one, a configuration not seen before), it answers None and the command takes its full path
(`cli/main.py`); `LOOPD_READ_PATH=models` makes every command take the full path.
"""
