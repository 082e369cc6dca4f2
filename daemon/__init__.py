"""loopd: a daemon for loop engineering."""

__version__ = "0.1.0"
