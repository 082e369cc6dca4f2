"""The only writer of `state/`: atomic files, events, run records, status, lock, inbox."""
