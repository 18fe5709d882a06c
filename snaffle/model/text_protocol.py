"""The text tool-call protocol: calls a model writes in its reply as `<tool_call>{json}</tool_call>` blocks (the
format Qwen-family models emit), or untagged as JSON objects with `name` and `arguments`, decoded leniently."""

from __future__ import annotations

import re
from typing import Any

from snaffle.model import lenient_json
from snaffle.types import ToolCall

TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def decode_text_calls(content: str) -> tuple[ToolCall, ...]:
    """Tool calls written in the reply as `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`; without tags,
    JSON objects with `name` and `arguments` in fenced blocks or bare in the text (what small Qwen models write)."""
    tagged = [m.group(1) for m in TOOL_CALL_RE.finditer(content)]
    raws = tagged or untagged_calls(content)
    return tuple(_text_call(raw, f"text_{index}") for index, raw in enumerate(raws))


def untagged_calls(content: str) -> list[str]:
    """Objects that look like tool calls (`name` and `arguments` keys), in order of appearance: JSON, or the
    Python-literal dialect small models drift into (see `lenient_json`)."""
    found: list[str] = []
    taken = 0
    for start, end in lenient_json.objects(content):
        if start < taken:
            continue  # inside a call already found
        try:
            value = lenient_json.loads(content[start:end])
        except ValueError:
            continue
        if isinstance(value, dict) and "name" in value and ("arguments" in value or "parameters" in value):
            found.append(content[start:end])
            taken = end
    return found


def _text_call(raw: str, call_id: str) -> ToolCall:
    payload, error = parse_arguments(raw)
    if error is not None:
        return ToolCall(call_id, "", {}, f"tool call is not valid JSON: {error}", raw)
    name = payload.get("name")
    arguments = payload.get("arguments", payload.get("parameters", {}))
    if isinstance(arguments, str):
        arguments, error = parse_arguments(arguments)
    if not isinstance(name, str) or not isinstance(arguments, dict):
        return ToolCall(call_id, str(name or ""), {}, 'expected {"name": "...", "arguments": {...}}', raw)
    return ToolCall(call_id, name, arguments, error, raw)


def parse_arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    """Decode a JSON object (or the Python-literal dialect of one); on failure the JSON parser's message
    (truncated JSON, wrong type)."""
    try:
        value = lenient_json.loads(raw) if raw.strip() else {}
    except ValueError as exc:
        return {}, str(exc)
    if not isinstance(value, dict):
        return {}, f"expected a JSON object, got {type(value).__name__}"
    return value, None
