"""snaffle's version (its own module, so the lowest layers can stamp it without importing the package's API)."""

__version__ = "0.1.0"
