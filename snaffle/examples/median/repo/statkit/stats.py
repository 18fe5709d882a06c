"""Descriptive statistics over sequences of numbers."""

from collections.abc import Sequence


def mean(values: Sequence[float]) -> float:
    """Return the arithmetic mean of a non-empty sequence."""
    if not values:
        raise ValueError("mean() arg is an empty sequence")
    return sum(values) / len(values)


def median(values: Sequence[float]) -> float:
    """Return the median of a non-empty sequence; the mean of the two middle values when the length is even."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("median() arg is an empty sequence")
    mid = n // 2
    if n % 2 == 1:
        return ordered[mid]
    return (ordered[mid] + ordered[mid + 1]) / 2


def spread(values: Sequence[float]) -> float:
    """Return the difference between the largest and the smallest value."""
    if not values:
        raise ValueError("spread() arg is an empty sequence")
    return max(values) - min(values)
