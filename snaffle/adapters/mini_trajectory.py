"""mini-swe-agent's trajectory (`*.traj.json`, format mini-swe-agent-1.x) as snaffle-trajectory/1 events.

What mini-swe-agent does not record is written as 0 (`latency_s` of a first call, `elapsed_s`) or false (`changed`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from snaffle.trajectory import gate_event, model_call_event, tool_call_event, tool_result_event
from snaffle.types import Event, GateResult, Message, ModelReply, ToolCall, ToolResult, Usage

MINI_STATUSES = {
    "Submitted": "submitted",
    "TimeExceeded": "timeout",
    "RepeatedFormatError": "malformed_tool_calls",
    "FormatError": "malformed_tool_calls",
    "UserInterruption": "interrupted",
    "KeyboardInterrupt": "interrupted",
}
SHIM_REFUSALS = ("budget_exceeded", "max_turns_exceeded", "timeout")


def exit_status(info: Mapping[str, Any], exception: str, step_limit: int) -> str:
    """mini-swe-agent's exit status in snaffle's vocabulary."""
    status = str(info.get("exit_status") or "")
    if status in MINI_STATUSES:
        return MINI_STATUSES[status]
    if status == "LimitsExceeded":
        calls = int((info.get("model_stats") or {}).get("api_calls") or 0)
        return "max_turns_exceeded" if step_limit and calls >= step_limit else "budget_exceeded"
    refused = next((kind for kind in SHIM_REFUSALS if kind in exception), None)
    if refused is not None:
        return refused
    return "model_error" if status else "interrupted"


class MiniConverter:
    """Walks mini-swe-agent's message list once, emitting model_call, tool_call, tool_result and gate events."""

    def __init__(self, messages: Sequence[Message]) -> None:
        self.messages = messages
        self.events: list[Event] = []
        self.usage = Usage()
        self.turn = 0
        self.sent = 0
        self.last_t: float | None = None

    def convert(self) -> list[Event]:
        for index, message in enumerate(self.messages):
            extra = message.get("extra") or {}
            if message.get("role") == "assistant":
                self.model_call(index, message, extra)
            elif "raw_output" in extra:
                self.tool_result(message, extra)
            elif extra.get("interrupt_type") == "FormatError":
                self.gate(message)
            if isinstance(extra.get("timestamp"), int | float):
                self.last_t = float(extra["timestamp"])
        return self.events

    def model_call(self, index: int, message: Message, extra: Mapping[str, Any]) -> None:
        self.turn += 1
        before = [wire(m) for m in self.messages[:index]]
        usage = call_usage(extra)
        self.usage += usage
        stamp = extra.get("timestamp")
        latency = round(float(stamp) - self.last_t, 3) if self.last_t is not None and stamp else 0.0
        reply = mini_reply(message, extra, usage, latency)
        cumulative = {**self.usage.as_dict(), "turns": self.turn}
        self.events.append(model_call_event(self.turn, before, self.sent, reply, usage, cumulative))
        self.sent = index + 1
        for number, action in enumerate(extra.get("actions") or []):
            call_id = action.get("tool_call_id") or f"call_{self.turn}_{number}"
            call = ToolCall(call_id, "bash", {"command": action.get("command", "")})
            self.events.append(tool_call_event(self.turn, call, None))

    def tool_result(self, message: Message, extra: Mapping[str, Any]) -> None:
        call_id = message.get("tool_call_id") or f"call_{self.turn}_0"
        result = ToolResult(call_id, "bash", text_of(message.get("content")), ok=extra.get("returncode") == 0)
        self.events.append(tool_result_event(self.turn, result, 0.0))

    def gate(self, message: Message) -> None:
        refusal = GateResult("format", False, text_of(message.get("content")))
        self.events.append(gate_event(self.turn, None, refusal))


def mini_reply(message: Message, extra: Mapping[str, Any], usage: Usage, latency_s: float) -> ModelReply:
    """One of mini-swe-agent's assistant messages as the reply it recorded (tool-call arguments as sent)."""
    calls = message.get("tool_calls") or []
    choices = (extra.get("response") or {}).get("choices") or [{}]
    return ModelReply(
        content=text_of(message.get("content")),
        tool_calls=tuple(_mini_call(c) for c in calls),
        reasoning=message.get("reasoning_content"),
        usage=usage,
        latency_s=latency_s,
        finish_reason=choices[0].get("finish_reason"),
        protocol="native" if calls else "text",
    )


def _mini_call(call: Any) -> ToolCall:
    """A native call as mini-swe-agent kept it; id, name and arguments are passed on as they are."""
    function: Any = call.get("function") or {}
    return ToolCall(call.get("id"), function.get("name"), {}, None, function.get("arguments"))


def call_usage(extra: Mapping[str, Any]) -> Usage:
    """Usage of one call from the raw response mini-swe-agent kept, and the cost it computed."""
    usage = (extra.get("response") or {}).get("usage") or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return Usage(
        int(usage.get("prompt_tokens") or 0),
        int(usage.get("completion_tokens") or 0),
        int(cached),
        int(reasoning),
        float(extra.get("cost") or 0.0),
    )


def wire(message: Message) -> Message:
    """A message as it went over the wire (mini-swe-agent's `extra` bookkeeping removed)."""
    return {key: value for key, value in message.items() if key != "extra"}


def text_of(content: object) -> str:
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)
