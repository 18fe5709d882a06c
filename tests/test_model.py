"""Decoding replies: native tool calls, the text protocol, reasoning, usage, shim headers."""

from __future__ import annotations

import openai
import pytest

from snaffle.model.client import (
    ModelConfig,
    decode_reply,
    is_retryable,
    request_body,
    shim_headers,
)
from snaffle.model.text_protocol import decode_text_calls


def completion(message: dict[str, object], usage: dict[str, object] | None = None) -> dict[str, object]:
    return {"choices": [{"message": message, "finish_reason": "stop"}], "usage": usage or {}}


def test_native_tool_calls_and_reasoning_are_kept() -> None:
    calls = [
        {"id": "a", "function": {"name": "bash", "arguments": '{"command": "ls"}'}},
        {"id": "b", "function": {"name": "bash", "arguments": '{"command": "l'}},
    ]
    message = {"content": None, "reasoning_content": "think first", "tool_calls": calls}
    usage = {"prompt_tokens": 10, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 8}}
    reply = decode_reply(completion(message, usage), 0.5, {})
    assert reply.protocol == "native" and reply.reasoning == "think first"
    assert reply.tool_calls[0].arguments == {"command": "ls"} and reply.tool_calls[0].error is None
    assert reply.tool_calls[1].error is not None and "Unterminated" in reply.tool_calls[1].error
    assert reply.usage.prompt_tokens == 10 and reply.usage.cached_tokens == 8


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>', [("bash", {"command": "ls"})]),
        ('I will look.\n<tool_call>\n{"name": "bash", "arguments": "{\\"command\\": \\"pwd\\"}"}\n</tool_call>',
         [("bash", {"command": "pwd"})]),
        ('<tool_call>{"name": "a", "arguments": {}}</tool_call> then <tool_call>{"name": "b", "arguments": {}}',
         [("a", {}), ("b", {})]),
        ("no call here", []),
        ('```json\n{"name": "run_test", "arguments": {"target": "t.py"}}\n```', [("run_test", {"target": "t.py"})]),
        ('I will search.\n{"name": "search_code", "arguments": {"query": "def f"}} and {"a": 1}',
         [("search_code", {"query": "def f"})]),
        ('{"name": "a", "parameters": {"x": 1}}\n{"name": "b", "arguments": {}}', [("a", {"x": 1}), ("b", {})]),
        ('{"unrelated": {"name": "x"}}', []),
    ],
)  # fmt: skip
def test_text_protocol_calls(text: str, expected: list[tuple[str, dict[str, str]]]) -> None:
    calls = decode_text_calls(text)
    assert [(c.name, dict(c.arguments)) for c in calls] == expected
    assert all(c.error is None for c in calls)


def test_text_protocol_malformed_calls_carry_the_error() -> None:
    (bad,) = decode_text_calls('<tool_call>{"name": "bash", "arguments": {"command": </tool_call>')
    assert bad.error is not None and "not valid JSON" in bad.error
    (wrong,) = decode_text_calls('<tool_call>["bash"]</tool_call>')
    assert wrong.error is not None


def test_text_protocol_reply_is_decoded_when_server_has_no_native_calls() -> None:
    reply = decode_reply(completion({"content": '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}'
                                                "</tool_call>"}), 0.1, {})  # fmt: skip
    assert reply.protocol == "text" and reply.tool_calls[0].name == "bash"


def test_request_body_sends_temperature_and_tools_only_when_configured() -> None:
    schema = {"name": "bash", "parameters": {}}
    plain = request_body(ModelConfig("http://x", "m"), [{"role": "user", "content": "hi"}], [schema])
    assert "temperature" not in plain and plain["tools"][0]["type"] == "function"
    text = request_body(ModelConfig("http://x", "m", temperature=0.8, tool_protocol="text"), [], [schema])
    assert text["temperature"] == 0.8 and "tools" not in text


def test_shim_headers_are_parsed() -> None:
    found = shim_headers({"X-Snaffle-Prompt-Tokens": "120", "x-snaffle-dollars": "0.5", "x-other": "1"})
    assert found == {"prompt_tokens": 120.0, "dollars": 0.5}


def test_shim_limit_refusals_are_not_retried() -> None:
    import httpx

    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")

    def error(status: int, kind: str) -> openai.APIStatusError:
        response = httpx.Response(status, request=request)
        return openai.APIStatusError("x", response=response, body={"type": kind})

    assert is_retryable(error(429, "rate_limit"))
    assert is_retryable(error(503, ""))
    assert not is_retryable(error(429, "budget_exceeded"))
    assert not is_retryable(error(400, ""))
