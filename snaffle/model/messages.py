"""The wire side of the loop: how replies and observations become OpenAI chat messages and trajectory records."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from snaffle.model import tokens
from snaffle.types import Event, Message, ModelReply, ToolResult, Usage


def assistant_message(reply: ModelReply) -> Message:
    """The assistant turn as it goes back into the history (native calls kept as calls, text kept as text)."""
    message: Message = {"role": "assistant", "content": reply.content}
    if reply.protocol == "native" and reply.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw_arguments}}
            for c in reply.tool_calls
        ]
    return message


def observation_messages(reply: ModelReply, results: Sequence[ToolResult]) -> list[Message]:
    """Native calls get one `tool` message each; text-protocol calls get one user message with every result."""
    if reply.protocol == "native":
        return [{"role": "tool", "tool_call_id": r.call_id, "content": r.output} for r in results]
    blocks = [f"<tool_response>\n{r.output}\n</tool_response>" for r in results]
    return [{"role": "user", "content": "\n".join(blocks)}]


def response_record(reply: ModelReply) -> dict[str, object]:
    return {
        "content": reply.content,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.raw_arguments} for c in reply.tool_calls],
        "reasoning_content": reply.reasoning,
        "finish_reason": reply.finish_reason,
        "protocol": reply.protocol,
    }


def model_call_event(turn: int, messages: Sequence[Message], sent: int, reply: ModelReply, usage: Usage,
                     cumulative: dict[str, object]) -> Event:  # fmt: skip
    """The trajectory's `model_call` line: what was appended since the last call, the reply, its usage."""
    return {
        "type": "model_call", "turn": turn, "messages_delta": list(messages[sent:]), "n_messages": len(messages),
        "messages_digest": digest(messages), "prompt_estimate": tokens.count_messages(messages),
        "response": response_record(reply), "usage": usage.as_dict(), "latency_s": round(reply.latency_s, 3),
        "cumulative": cumulative, "shim": dict(reply.shim),
    }  # fmt: skip


def digest(messages: Sequence[Message]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]
