"""After it lands: each landed run followed on its target (kept, edited, reverted, gone).

`identity.py` (what landed: commits, patch-ids, lines), `gitread.py` (the git reads),
`follow.py` (one run brought up to date, incrementally), `verdict.py` (the state, the
windows), `sweep.py` (every landed run: `loopd aftermath` and the daemon), docs/aftermath.md.
"""
