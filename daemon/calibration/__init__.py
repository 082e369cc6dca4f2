"""Calibration of the judge: labelled attempts, each judged twice, and the judge's error rates.

`cases.py` loads labelled attempts (the set shipped in `cases/`, a `--cases` folder, or the
home's own record); `trial.py` asks the judge about each one with its evidence in two orders;
`figures.py` turns the answers into false-pass and false-fail rates with Wilson intervals;
`warnings.py` says when the judge in use has no calibration or too high a false-pass rate.
"""
