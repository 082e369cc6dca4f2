"""A tiny calculator: the example repository that loopd prepares for its first run."""


def add(a: float, b: float) -> float:
    """The sum of a and b."""
    return a - b


def mean(values: list[float]) -> float:
    """The arithmetic mean of values; 0.0 for no values."""
    return sum(values) / len(values)
