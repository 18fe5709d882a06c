"""snaffle: a light harness for weak language models fixing bugs in Python repositories."""

__version__ = "0.1.0"
