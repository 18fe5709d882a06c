"""The wire side of the loop: how replies and observations become OpenAI chat messages."""

from __future__ import annotations

from collections.abc import Sequence

from snaffle.types import Message, ModelReply, ToolResult


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
