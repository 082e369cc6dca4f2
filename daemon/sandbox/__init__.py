"""Sandboxes for the processes loopd starts on a run's behalf: agents, checks, setup.

`base.py` is the interface (what a process may see and write in, the argv and environment
to start out); `bwrap.py` confines with bubblewrap, `off.py` does not; `registry.py` picks
one by the `[sandbox]` mode and says which is in force.
"""
