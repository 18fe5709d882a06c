"""statkit: small descriptive statistics for plain Python sequences."""

from statkit.stats import mean, median, spread

__all__ = ["mean", "median", "spread"]
