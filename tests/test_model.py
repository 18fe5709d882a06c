"""Decoding replies (native tool calls, the text protocol, reasoning, usage, shim headers) and the retry schedule."""

from __future__ import annotations

import time

import openai
import pytest

from snaffle.exceptions import EndpointError, ModelError, UserError
from snaffle.model.client import (
    BACKOFF_MAX_S,
    BACKOFF_MIN_S,
    MAX_ATTEMPTS,
    ModelConfig,
    OpenAIModel,
    check_endpoint,
    decode_reply,
    is_retryable,
    request_body,
    shim_headers,
)
from snaffle.model.text_protocol import decode_text_calls
from snaffle.testing import ScriptedServer
from tests.loopback import busy_server, closed_port, web_page


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
        (
            'I will look.\n<tool_call>\n{"name": "bash", "arguments": "{\\"command\\": \\"pwd\\"}"}\n</tool_call>',
            [("bash", {"command": "pwd"})],
        ),
        (
            '<tool_call>{"name": "a", "arguments": {}}</tool_call> then <tool_call>{"name": "b", "arguments": {}}',
            [("a", {}), ("b", {})],
        ),
        ("no call here", []),
        ('```json\n{"name": "run_test", "arguments": {"target": "t.py"}}\n```', [("run_test", {"target": "t.py"})]),
        (
            'I will search.\n{"name": "search_code", "arguments": {"query": "def f"}} and {"a": 1}',
            [("search_code", {"query": "def f"})],
        ),
        ('{"name": "a", "parameters": {"x": 1}}\n{"name": "b", "arguments": {}}', [("a", {"x": 1}), ("b", {})]),
        ('{"unrelated": {"name": "x"}}', []),
    ],
)
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
    reply = decode_reply(
        completion({"content": '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>'}), 0.1, {}
    )
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


HELLO = [{"role": "user", "content": "hi"}]


def backoff_bound(attempt: int) -> float:
    """The longest wait the schedule allows after failed attempt `attempt`: exponential from the floor, capped."""
    return min(BACKOFF_MAX_S, BACKOFF_MIN_S * 2.0 ** (attempt - 1))


def recording_model(base_url: str, hooked: list[tuple[int, float]], slept: list[float]) -> OpenAIModel:
    """An OpenAIModel whose retry hook records (attempt, wait) and whose backoff is recorded instead of slept."""
    config = ModelConfig(base_url=base_url, model="scripted", retry_sleep=slept.append)
    return OpenAIModel(config, on_retry=lambda attempt, error, wait: hooked.append((attempt, wait)))


def test_retries_on_429_and_500_then_succeed_within_the_schedule() -> None:
    hooked: list[tuple[int, float]] = []
    slept: list[float] = []
    script: list[dict[str, object]] = [
        {"status": 429, "headers": {"retry-after": "0"}},
        {"status": 500},
        {"content": "DONE"},
    ]
    with ScriptedServer(script) as server:
        reply = recording_model(server.base_url, hooked, slept).complete(HELLO, [])
        assert reply.content == "DONE" and len(server.requests) == 3
    assert [attempt for attempt, _ in hooked] == [1, 2]
    assert slept == [wait for _, wait in hooked]
    assert all(BACKOFF_MIN_S <= wait <= backoff_bound(attempt) for attempt, wait in hooked)


def test_retries_stop_after_the_last_attempt_and_each_wait_is_capped() -> None:
    hooked: list[tuple[int, float]] = []
    slept: list[float] = []
    with ScriptedServer([{"status": 503, "repeat": MAX_ATTEMPTS + 2}]) as server:
        with pytest.raises(ModelError, match="HTTP 503"):
            recording_model(server.base_url, hooked, slept).complete(HELLO, [])
        assert len(server.requests) == MAX_ATTEMPTS
    assert [attempt for attempt, _ in hooked] == list(range(1, MAX_ATTEMPTS))
    assert slept == [wait for _, wait in hooked]
    assert all(BACKOFF_MIN_S <= wait <= backoff_bound(attempt) <= BACKOFF_MAX_S for attempt, wait in hooked)


NOT_COMPLETIONS = (
    ("an HTML page", "<!DOCTYPE html><html><body>Welcome to nginx!</body></html>", "<!DOCTYPE html>"),
    ("a JSON list", "[1, 2]", "[1, 2]"),
    ("an object without choices", '{"object": "list", "data": []}', '"object"'),
    ("choices a string", '{"choices": "x"}', "choices"),
    ("no choices", '{"choices": []}', "choices"),
    ("a choice without a message", '{"choices": [{"text": "hi"}]}', "choices"),
    ("content a number", '{"choices": [{"message": {"content": 5}}]}', "choices"),
    ("tool calls an object", '{"choices": [{"message": {"content": "", "tool_calls": {"a": 1}}}]}', "tool_calls"),
    ("usage a list", '{"choices": [{"message": {"content": "hi"}}], "usage": [1]}', "usage"),
)


@pytest.mark.parametrize(("case", "body", "shown"), NOT_COMPLETIONS, ids=[c[0] for c in NOT_COMPLETIONS])
def test_an_answer_that_is_not_a_chat_completion_is_a_model_error_at_once(case: str, body: str, shown: str) -> None:
    """A 200 whose body is not a chat completion: one ModelError naming what came instead, not retried."""
    with ScriptedServer([{"raw_body": body, "repeat": 3}, {"content": "DONE"}]) as server:
        with pytest.raises(ModelError, match="not a chat completion") as caught:
            recording_model(server.base_url, [], []).complete(HELLO, [])
        assert len(server.requests) == 1
    assert shown in caught.value.message and "\n" not in caught.value.message


def test_the_shims_502_for_a_garbage_answer_is_not_retried() -> None:
    import httpx

    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(502, request=request)
    garbage = openai.APIStatusError("x", response=response, body={"error": {"type": "upstream_invalid_response"}})
    assert not is_retryable(garbage)
    assert is_retryable(openai.APIStatusError("x", response=response, body={"error": {"type": "upstream_error"}}))


def test_a_tool_call_whose_function_is_not_an_object_is_a_rejected_call() -> None:
    reply = decode_reply(completion({"content": "", "tool_calls": [{"id": "a", "function": "bash"}]}), 0.1, {})
    assert reply.tool_calls[0].name == "" and reply.tool_calls[0].error is None


# --- the start-up check of the endpoint ---


def test_check_endpoint_accepts_an_openai_server_and_a_404() -> None:
    with ScriptedServer([]) as server:
        check_endpoint(server.base_url)
        check_endpoint(server.base_url.removesuffix("/v1") + "/elsewhere")  # 404 at /models: still a server


def test_a_busy_server_is_reachable() -> None:
    """It accepted the connection and does not answer within the probe's timeout: go on, the call has its own."""
    with busy_server() as url:
        started = time.monotonic()
        check_endpoint(url, timeout_s=0.5)
        assert time.monotonic() - started < 2.0


def test_a_refused_connection_is_unreachable() -> None:
    url = closed_port()
    with pytest.raises(EndpointError, match="unreachable") as caught:
        check_endpoint(url, timeout_s=0.5)
    assert url in str(caught.value) and "refused" in str(caught.value) and "--base-url" in str(caught.value)


def test_a_failed_name_lookup_is_unreachable() -> None:
    with pytest.raises(EndpointError, match="unreachable") as caught:
        check_endpoint("http://no-such-host.invalid/v1", timeout_s=2.0)
    assert "no-such-host.invalid" in str(caught.value)


def test_a_web_page_is_not_an_openai_endpoint() -> None:
    with web_page() as url:
        with pytest.raises(EndpointError, match="not an OpenAI-compatible API") as caught:
            check_endpoint(url, timeout_s=2.0)
    message = str(caught.value)
    assert "text/html" in message and "Welcome to nginx" in message and "\n" not in message


@pytest.mark.parametrize("url", ["localhost:8080/v1", "ftp://127.0.0.1/v1", "http://", "http://h:99999/v1", ""])
def test_a_base_url_that_is_not_http_is_bad_input(url: str) -> None:
    with pytest.raises(UserError, match="http:// or https://") as caught:
        check_endpoint(url)
    assert not isinstance(caught.value, EndpointError)
