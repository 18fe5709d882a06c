"""The OpenAI wire format as the shim reads it: SSE events, `usage` objects, and the headers it passes on."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from snaffle.shim.ledger import Totals
from snaffle.types import Usage

PASSED_HEADERS = frozenset({"content-type", "retry-after", "retry-after-ms", "x-request-id", "x-should-retry"})
EVENT_END = re.compile(rb"\r?\n\r?\n")
USAGE_NULL = re.compile(rb'"usage"\s*:\s*null')
DONE_EVENT = b"data: [DONE]\n\n"


def split_events(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Complete SSE events (each with its blank-line terminator) and the incomplete rest."""
    events, start = [], 0
    for match in EVENT_END.finditer(buffer):
        events.append(buffer[start : match.end()])
        start = match.end()
    return events, buffer[start:]


def inspect_event(event: bytes) -> tuple[str, Usage | None]:
    """Classify one SSE event: `done`, `usage` (a usage-only chunk: no choices), or `plain`; and its usage."""
    if event.strip() in (b"data: [DONE]", b"data:[DONE]"):
        return "done", None
    if b'"usage"' not in event or USAGE_NULL.search(event):
        return "plain", None
    data = b"".join(line[5:] for line in event.splitlines() if line.startswith(b"data:"))
    try:
        chunk = json.loads(data)
    except ValueError:
        return "plain", None
    if not isinstance(chunk, dict):
        return "plain", None
    usage = parse_usage(chunk.get("usage"))
    return ("usage" if usage is not None and not chunk.get("choices") else "plain"), usage


def streamed_text(events: list[bytes]) -> str:
    """The text a stream delivered in its chunks: content, reasoning and tool-call names and arguments."""
    parts: list[str] = []
    for event in events:
        data = b"".join(line[5:] for line in event.splitlines() if line.startswith(b"data:"))
        try:
            chunk = json.loads(data)
        except ValueError:
            continue
        for choice in chunk.get("choices") or [] if isinstance(chunk, dict) else []:
            delta = choice.get("delta") or {} if isinstance(choice, dict) else {}
            parts += [str(delta.get(k) or "") for k in ("content", "reasoning_content")]
            for call in delta.get("tool_calls") or []:
                function = call.get("function") or {} if isinstance(call, dict) else {}
                parts += [str(function.get("name") or ""), str(function.get("arguments") or "")]
    return "".join(parts)


def chat_completion(content: bytes) -> dict[str, Any] | None:
    """A non-streamed answer as a chat-completion object, or None when it is not one (not JSON, or no `choices`)."""
    try:
        answer = json.loads(content)
    except (ValueError, RecursionError):  # undecodable bytes are a ValueError too
        return None
    return answer if isinstance(answer, dict) and isinstance(answer.get("choices"), list) else None


def error_body(kind: str, message: str) -> dict[str, Any]:
    """An OpenAI-style error object; `kind` is both its type and its code."""
    return {"error": {"type": kind, "code": kind, "message": message, "param": None}}


def parse_usage(raw: object) -> Usage | None:
    """Tokens from an OpenAI `usage` object (cached and reasoning from its details, or DeepSeek's fields)."""
    if not isinstance(raw, dict):
        return None
    prompt_details = raw.get("prompt_tokens_details") or {}
    completion_details = raw.get("completion_tokens_details") or {}
    cached = prompt_details.get("cached_tokens") or raw.get("prompt_cache_hit_tokens") or 0
    return Usage(
        int(raw.get("prompt_tokens") or 0),
        int(raw.get("completion_tokens") or 0),
        int(cached),
        int(completion_details.get("reasoning_tokens") or 0),
    )


def usage_headers(totals: Totals, call_number: int | None = None) -> dict[str, str]:
    """The instance's cumulative usage as `x-snaffle-*` headers (after this call unless marked otherwise)."""
    usage = totals.usage
    headers = {
        "x-snaffle-calls": str(totals.calls),
        "x-snaffle-prompt-tokens": str(usage.prompt_tokens),
        "x-snaffle-completion-tokens": str(usage.completion_tokens),
        "x-snaffle-cached-tokens": str(usage.cached_tokens),
        "x-snaffle-reasoning-tokens": str(usage.reasoning_tokens),
        "x-snaffle-dollars": "unknown" if usage.unpriced else f"{usage.dollars:.8f}",
        "x-snaffle-usage-unknown": str(totals.usage_unknown),
    }
    if call_number is not None:
        headers["x-snaffle-call"] = str(call_number)
    return headers


def passed_headers(headers: httpx.Headers) -> dict[str, str]:
    """The upstream response headers worth passing on (content type, retry and rate-limit hints)."""
    return {name: value for name, value in headers.items() if name in PASSED_HEADERS or name.startswith("x-ratelimit-")}
