"""The observation policy: batched collapse keeps call ids; compaction runs when the context is near full."""

from __future__ import annotations

from snaffle.observations import ObservationPolicy, PolicyConfig, collapse_label, estimate_context
from snaffle.types import Message, ToolCall, ToolResult

BIG = PolicyConfig(keep_full=2, batch=2, context_window=100_000)


def history(turns: int, native: bool = True, config: PolicyConfig = BIG) -> tuple[list[Message], ObservationPolicy]:
    policy = ObservationPolicy(config)
    messages: list[Message] = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    for turn in range(turns):
        call = ToolCall(f"c{turn}", "read_entity", {"selector": f"a.py::f{turn}"})
        result = ToolResult(call.id, call.name, "line\n" * 10)
        messages.append({"role": "assistant", "content": ""})
        policy.track(len(messages), [call], [result], native)
        if native:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result.output})
        else:
            messages.append({"role": "user", "content": f"<tool_response>\n{result.output}\n</tool_response>"})
    return messages, policy


def test_collapse_waits_for_a_full_batch_then_keeps_the_last_n() -> None:
    messages, policy = history(4)
    assert policy.collapse(messages, 5) == []
    messages, policy = history(5)
    events = policy.collapse(messages, 5)
    assert [e["call_id"] for e in events] == ["c0", "c1", "c2"]
    tool_messages = [m for m in messages if m["role"] == "tool"]
    assert tool_messages[0]["content"] == "[collapsed] read_entity a.py::f0 (10 lines)"
    assert tool_messages[0]["tool_call_id"] == "c0" and tool_messages[-1]["content"].startswith("line")
    assert policy.collapse(messages, 5) == []


def test_collapse_in_text_protocol_messages() -> None:
    messages, policy = history(5, native=False)
    policy.collapse(messages, 5)
    assert messages[3]["content"] == "<tool_response>\n[collapsed] read_entity a.py::f0 (10 lines)\n</tool_response>"


def test_compaction_runs_only_past_the_threshold_and_is_labelled() -> None:
    messages, policy = history(3)
    assert policy.compact(messages, 3, estimate_context) == []
    big, small = history(3, config=PolicyConfig(keep_full=2, batch=2, context_window=60, compact_at=0.5))
    *collapses, event = small.compact(big, 3, estimate_context)
    assert [c["call_id"] for c in collapses] == ["c0", "c1"]
    assert event["type"] == "compaction" and event["summary"].startswith("[summary]")
    assert event["after_tokens"] < event["before_tokens"]


def test_collapse_label() -> None:
    call = ToolCall("c", "search_code", {"query": "x" * 100, "cap": 5})
    label = collapse_label(call, ToolResult("c", "search_code", "a\nb"))
    assert label.startswith("[collapsed] search_code xxx") and label.endswith("... (2 lines)")
