"""Tool schemas derived from signatures, and argument checks before dispatch."""

from __future__ import annotations

from typing import Literal

import pytest

from snaffle.exceptions import Submitted, ToolFailure
from snaffle.tools import Registry, schema_of
from snaffle.types import GateResult, ToolCall, ToolRun


def greet(name: str, times: int = 1, style: Literal["plain", "loud"] = "plain", tags: list[str] | None = None) -> str:
    """Greet someone.

    Args:
      name: who to greet
      times: how often
    """
    return " ".join([name.upper() if style == "loud" else name] * times)


def test_schema_from_signature_and_docstring() -> None:
    schema = schema_of(greet)
    params = schema["parameters"]
    assert schema["description"] == "Greet someone."
    assert params["required"] == ["name"] and params["additionalProperties"] is False
    assert params["properties"]["name"] == {"type": "string", "description": "who to greet"}
    assert params["properties"]["times"]["type"] == "integer"
    assert params["properties"]["style"] == {"type": "string", "enum": ["plain", "loud"]}
    assert params["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}


@pytest.mark.parametrize(
    ("call", "problem"),
    [
        (ToolCall("c1", "greet", {"name": "x"}), None),
        (ToolCall("c1", "greet", {"name": "x", "times": None}), None),
        (ToolCall("", "greet", {"name": "x"}), "no id"),
        (ToolCall("c1", "shout", {"name": "x"}), "unknown tool 'shout'"),
        (ToolCall("c1", "greet", {}), "missing required argument(s): name"),
        (ToolCall("c1", "greet", {"name": "x", "loud": True}), "unknown argument(s): loud"),
        (ToolCall("c1", "greet", {"name": 3}), "expected string"),
        (ToolCall("c1", "greet", {"name": "x", "times": True}), "expected integer"),
        (ToolCall("c1", "greet", {"name": "x", "style": "soft"}), "must be one of plain, loud"),
        (ToolCall("c1", "greet", {"name": "x", "tags": ["a", 1]}), "item 1"),
        (ToolCall("c1", "greet", {}, error="Unterminated string"), "could not be decoded: Unterminated"),
    ],
)
def test_check_rejects_what_does_not_fit(call: ToolCall, problem: str | None) -> None:
    registry = Registry()
    registry.register(greet)
    found = registry.check(call)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_run_dispatches_checked_calls() -> None:
    registry = Registry()
    registry.register(greet)
    assert registry.run(ToolCall("c1", "greet", {"name": "ab", "times": 2, "style": "loud"})) == ToolRun("AB AB")
    assert registry.names == ["greet"]


def test_run_passes_a_tools_gate_decisions_on() -> None:
    def checked(text: str) -> ToolRun:
        """Echo, noting a gate decision."""
        return ToolRun(text, (GateResult("lint", True),))

    registry = Registry()
    registry.register(checked)
    assert registry.run(ToolCall("c1", "checked", {"text": "hi"})) == ToolRun("hi", (GateResult("lint", True),))


def test_run_turns_a_tools_exception_into_a_failure_naming_its_class() -> None:
    def crash(path: str) -> str:
        raise ValueError(f"embedded null byte in {path!r}")

    def stop(path: str) -> str:
        raise Submitted("green")

    registry = Registry()
    registry.register(crash)
    registry.register(stop)
    with pytest.raises(ToolFailure, match=r"^ValueError: embedded null byte in 'a\\x00b'$"):
        registry.run(ToolCall("c1", "crash", {"path": "a\x00b"}))
    with pytest.raises(Submitted):
        registry.run(ToolCall("c2", "stop", {"path": "x"}))


def test_run_leaves_every_text_encodable() -> None:
    def name(path: str) -> str:
        return f"found {path}"

    def refuse(path: str) -> str:
        raise ToolFailure(f"no file {path}")

    registry = Registry()
    registry.register(name)
    registry.register(refuse)
    assert registry.run(ToolCall("c1", "name", {"path": "b\udcffd.py"})).output == "found b\\xffd.py"
    with pytest.raises(ToolFailure, match=r"^no file b\\xffd\.py$"):
        registry.run(ToolCall("c2", "refuse", {"path": "b\udcffd.py"}))
