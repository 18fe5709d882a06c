"""Execution boundary: tools as plain functions, schemas derived from their signatures, calls checked first.

A call whose id, name or arguments do not fit the tool's schema is rejected with an observation and never runs.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args, get_origin

from snaffle.exceptions import Interrupt, ToolFailure
from snaffle.types import ToolCall, ToolRun
from snaffle.workspace import printable

JSON_TYPES: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
ARG_LINE_RE = re.compile(r"^\s{2,}(\w+):\s*(.+)$")

ToolFn = Callable[..., str | ToolRun]
"""A tool: a plain function returning its observation, or a `ToolRun` when it also reports gate decisions."""


@dataclass(frozen=True)
class ToolSpec:
    """A registered tool: its function and its JSON schema (OpenAI `function` object)."""

    name: str
    fn: ToolFn
    schema: Mapping[str, Any]


class Registry:
    """The tools of one arm (the `Toolbox` seam); `check` validates a call against its tool's schema before anything
    runs."""

    def __init__(self) -> None:
        self._tools: dict[str, ToolSpec] = {}

    def register(self, fn: ToolFn, name: str | None = None) -> ToolFn:
        spec = ToolSpec(name or fn.__name__, fn, schema_of(fn, name))
        self._tools[spec.name] = spec
        return fn

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> list[Mapping[str, Any]]:
        return [spec.schema for spec in self._tools.values()]

    def check(self, call: ToolCall) -> str | None:
        """None when the call may run, else the reason it is rejected."""
        if call.error is not None:
            return f"arguments could not be decoded: {call.error}"
        if not call.id:
            return "tool call has no id"
        spec = self._tools.get(call.name)
        if spec is None:
            return f"unknown tool {call.name!r}; available: {', '.join(self._tools)}"
        return check_arguments(spec.schema["parameters"], call.arguments)

    def run(self, call: ToolCall) -> ToolRun:
        """Run a checked call; a plain observation becomes a `ToolRun` without gates. Every exception of the tool
        but an `Interrupt` leaves as a `ToolFailure` (a foreign one named by its class: `ValueError: ...`), and
        every text leaves encodable (`printable`)."""
        try:
            output = self._tools[call.name].fn(**call.arguments)
        except Interrupt:
            raise
        except ToolFailure as failure:
            raise ToolFailure(printable(str(failure)), failure.gates) from failure
        except Exception as exc:
            # The one place a tool's exception is caught whole: the model chose the arguments and the repository
            # may be hostile (symlinks, odd names, odd bytes), so any failure is that call's observation and the
            # run goes on; only an Interrupt (Submitted, limits) ends it.
            raise ToolFailure(printable(f"{type(exc).__name__}: {exc}")) from exc
        run = output if isinstance(output, ToolRun) else ToolRun(output)
        return replace(run, output=printable(run.output))


def schema_of(fn: Callable[..., Any], name: str | None = None) -> dict[str, Any]:
    """An OpenAI function schema from a signature and a Google-style docstring (`Args:` lines)."""
    doc = inspect.getdoc(fn) or ""
    summary, arg_docs = _parse_doc(doc)
    hints = typing.get_type_hints(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.name == "self":
            continue
        prop = _json_type(hints.get(param.name, str))
        if param.name in arg_docs:
            prop["description"] = arg_docs[param.name]
        properties[param.name] = prop
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
    parameters = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return {"name": name or fn.__name__, "description": summary, "parameters": parameters}


def _parse_doc(doc: str) -> tuple[str, dict[str, str]]:
    head, _, rest = doc.partition("\nArgs:\n")
    args = {m.group(1): m.group(2).strip() for m in map(ARG_LINE_RE.match, rest.splitlines()) if m}
    return " ".join(head.split()), args


def _json_type(hint: Any) -> dict[str, Any]:
    origin = get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in get_args(hint) if a is not type(None)]
        return _json_type(options[0])
    if origin is Literal:
        values = list(get_args(hint))
        return {"type": JSON_TYPES[type(values[0])], "enum": values}
    if origin is list:
        (item,) = get_args(hint) or (str,)
        return {"type": "array", "items": _json_type(item)}
    return {"type": JSON_TYPES.get(hint, "string")}


def check_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> str | None:
    """Check arguments against the schema subset `schema_of` produces; None when they fit."""
    properties = schema.get("properties", {})
    missing = [name for name in schema.get("required", []) if name not in arguments]
    if missing:
        return f"missing required argument(s): {', '.join(missing)}"
    unknown = [name for name in arguments if name not in properties]
    if unknown:
        return f"unknown argument(s): {', '.join(unknown)}; expected: {', '.join(properties)}"
    for name, value in arguments.items():
        problem = check_value(properties[name], value)
        if problem:
            return f"argument {name!r}: {problem}"
    return None


def check_value(schema: Mapping[str, Any], value: Any) -> str | None:
    """None when `value` fits a property schema (type, enum, array items)."""
    if value is None:
        return None
    expected = schema.get("type", "string")
    if not _is_type(expected, value):
        return f"expected {expected}, got {type(value).__name__} {str(value)[:40]!r}"
    if "enum" in schema and value not in schema["enum"]:
        return f"must be one of {', '.join(map(str, schema['enum']))}, got {value!r}"
    if expected == "array":
        for item in value:
            problem = check_value(schema.get("items", {}), item)
            if problem:
                return f"item {item!r}: {problem}"
    return None


def _is_type(expected: str, value: Any) -> bool:
    if expected == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    python = {"string": str, "boolean": bool, "array": list, "object": dict}[expected]
    return isinstance(value, python)
