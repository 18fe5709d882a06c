"""Test doubles for the whole project: a scripted OpenAI-compatible model server on loopback."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from snaffle.testing.scripted_server import ReceivedRequest, ScriptedServer, load_script

__all__ = ["ReceivedRequest", "ScriptedServer", "load_script"]


def __getattr__(name: str) -> Any:
    """Import the server lazily, so `python -m snaffle.testing.scripted_server` runs it only once."""
    if name in __all__:
        from snaffle.testing import scripted_server

        return getattr(scripted_server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
