"""Tests for the scripted model server, driven over real loopback HTTP by httpx and the openai SDK."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import (
    ChatCompletionMessage,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
)

from snaffle.testing import ReceivedRequest, ScriptedServer, load_script
from snaffle.testing.scripted_server import count_tokens

USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "fix the bug"}]


Sdk = Callable[..., openai.OpenAI]


@pytest.fixture
def sdk() -> Iterator[Sdk]:
    """Make real openai clients (no retries) for a server or base URL; close them after the test."""
    made: list[openai.OpenAI] = []

    def make(target: ScriptedServer | str, timeout: float = 5.0) -> openai.OpenAI:
        base_url = target if isinstance(target, str) else target.base_url
        made.append(openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=timeout))
        return made[-1]

    yield make
    for client in made:
        client.close()


def post(srv: ScriptedServer, body: dict[str, Any], path: str = "/chat/completions") -> httpx.Response:
    return httpx.post(srv.base_url + path, json=body, timeout=5)


def function_calls(message: ChatCompletionMessage) -> list[tuple[str, str, str]]:
    calls = [c for c in message.tool_calls or [] if isinstance(c, ChatCompletionMessageFunctionToolCall)]
    return [(c.id, c.function.name, c.function.arguments) for c in calls]


def sse_events(response: httpx.Response) -> list[str]:
    return [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]


def test_non_stream_text_over_httpx_with_keep_alive() -> None:
    with (
        ScriptedServer([{"content": "hello"}, {"content": "again"}]) as srv,
        httpx.Client(timeout=5) as client,
    ):
        first = client.post(srv.base_url + "/chat/completions", json={"model": "qwen", "messages": USER})
        second = client.post(srv.base_url + "/chat/completions", json={"model": "qwen", "messages": USER})
    data = first.json()
    assert first.status_code == 200 and first.headers["content-type"] == "application/json"
    assert data["object"] == "chat.completion" and data["model"] == "qwen"
    assert data["choices"][0]["message"] == {"role": "assistant", "content": "hello"}
    assert data["choices"][0]["finish_reason"] == "stop"
    usage = data["usage"]
    assert usage["prompt_tokens"] == 4 + count_tokens("fix the bug")
    assert usage["completion_tokens"] == count_tokens("hello")
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert second.json()["choices"][0]["message"]["content"] == "again"
    received = srv.requests[0]
    assert received == ReceivedRequest("/v1/chat/completions", received.headers, {"model": "qwen", "messages": USER})
    assert received.headers["content-type"] == "application/json"


def test_sdk_text_and_reasoning_content(sdk: Sdk) -> None:
    with ScriptedServer([{"content": "the fix", "reasoning_content": "look at line 3"}]) as srv:
        reply = sdk(srv).chat.completions.create(model="m", messages=USER)
    message = reply.choices[0].message
    assert (message.content, reply.choices[0].finish_reason, reply.model) == ("the fix", "stop", "m")
    assert (message.model_extra or {})["reasoning_content"] == "look at line 3"
    assert reply.usage is not None and reply.usage.total_tokens > 0


def test_sdk_decodes_tool_calls_with_default_and_given_ids(sdk: Sdk) -> None:
    calls = [
        {"name": "read_entity", "arguments": {"selector": "a.py::f"}},
        {"name": "run_test", "id": "mine"},
    ]
    with ScriptedServer([{"content": "x"}, {"tool_calls": calls}]) as srv:
        client = sdk(srv)
        client.chat.completions.create(model="m", messages=USER)
        reply = client.chat.completions.create(model="m", messages=USER)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    decoded = [(i, name, json.loads(arguments)) for i, name, arguments in function_calls(choice.message)]
    assert decoded == [("call_2_0", "read_entity", {"selector": "a.py::f"}), ("mine", "run_test", {})]


def test_malformed_arguments_are_sent_verbatim(sdk: Sdk) -> None:
    truncated = '{"selector": "a.py::f", "keyw'
    script = [{"tool_calls": [{"name": "read_entity", "arguments": truncated}], "repeat": 2}]
    with ScriptedServer(script) as srv:
        raw = post(srv, {"messages": USER}).json()["choices"][0]["message"]["tool_calls"][0]
        reply = sdk(srv).chat.completions.create(model="m", messages=USER)
    assert raw["function"]["arguments"] == truncated
    assert function_calls(reply.choices[0].message) == [("call_2_0", "read_entity", truncated)]


@pytest.mark.parametrize(
    ("override", "expected"),
    (
        ({"prompt_tokens": 100, "completion_tokens": 7}, (100, 7, 107, 0, 0)),
        (
            {
                "prompt_tokens_details": {"cached_tokens": 60},
                "completion_tokens_details": {"reasoning_tokens": 5},
            },
            (None, None, None, 60, 5),
        ),
        ({"cached_tokens": 3, "reasoning_tokens": 2, "total_tokens": 1}, (None, None, 1, 3, 2)),
    ),
)
def test_usage_overrides(override: dict[str, Any], expected: tuple[int | None, ...]) -> None:
    with ScriptedServer([{"content": "ok", "usage": override}]) as srv:
        usage = post(srv, {"messages": USER}).json()["usage"]
    got = (
        usage["prompt_tokens"],
        usage["completion_tokens"],
        usage["total_tokens"],
        usage["prompt_tokens_details"]["cached_tokens"],
        usage["completion_tokens_details"]["reasoning_tokens"],
    )
    assert all(want is None or want == have for want, have in zip(expected, got, strict=True))


def test_prompt_tokens_count_content_parts_and_tool_call_arguments() -> None:
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"function": {"name": "f", "arguments": '{"a": 1}'}}],
        },
        {"role": "tool", "tool_call_id": "c", "content": "done"},
    ]
    with ScriptedServer([{"tool_calls": [{"name": "f", "arguments": {"b": 2}}]}]) as srv:
        usage = post(srv, {"messages": messages}).json()["usage"]
    texts = ["be brief", '{"a": 1}', "done"]
    assert usage["prompt_tokens"] == 3 * 4 + sum(count_tokens(t) for t in texts)
    assert usage["completion_tokens"] == count_tokens('{"b": 2}')


def test_sdk_stream_with_usage_assembles_content_and_tool_calls(sdk: Sdk) -> None:
    entry = {
        "content": "I will read it",
        "stream_chunks": 4,
        "tool_calls": [{"name": "read_entity", "arguments": {"selector": "pkg/mod.py::func"}}],
    }
    with ScriptedServer([entry]) as srv:
        stream = sdk(srv).chat.completions.create(
            model="m",
            messages=USER,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    argument_parts = [
        call.function.arguments
        for c in chunks
        if c.choices
        for call in c.choices[0].delta.tool_calls or []
        if call.function and call.function.arguments
    ]
    heads = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or [] if call.id]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert content == "I will read it" and len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 4
    assert len(argument_parts) >= 2 and json.loads("".join(argument_parts)) == {"selector": "pkg/mod.py::func"}
    assert [(h.index, h.id, h.type, h.function and h.function.name) for h in heads] == [
        (0, "call_1_0", "function", "read_entity")
    ]
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == chunks[-1].usage.prompt_tokens + chunks[-1].usage.completion_tokens


def test_stream_without_include_usage_has_no_usage_chunk(sdk: Sdk) -> None:
    with ScriptedServer([{"content": "plain", "reasoning_content": "hm"}] * 2) as srv:
        with httpx.stream("POST", srv.base_url + "/chat/completions", json={"stream": True, "messages": USER}) as r:
            assert r.headers["content-type"] == "text/event-stream"
            events = sse_events(r)
        chunks = list(sdk(srv).chat.completions.create(model="m", messages=USER, stream=True))
    assert events[-1] == "[DONE]"
    decoded = [json.loads(e) for e in events[:-1]]
    assert all("usage" not in d and d["object"] == "chat.completion.chunk" for d in decoded)
    assert "".join(d["choices"][0]["delta"].get("reasoning_content", "") for d in decoded) == "hm"
    assert decoded[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(c.usage is None for c in chunks) and chunks[-1].choices[0].finish_reason == "stop"


def test_cut_stream_ends_abruptly_without_usage_or_done(sdk: Sdk) -> None:
    entry = {"content": "a long answer", "cut_stream_after": 2}
    with ScriptedServer([entry, entry]) as srv:
        seen: list[Any] = []
        with pytest.raises(openai.APIConnectionError):
            stream = sdk(srv).chat.completions.create(
                model="m",
                messages=USER,
                stream=True,
                stream_options={"include_usage": True},
            )
            seen.extend(stream)
        events: list[str] = []
        with pytest.raises(httpx.RemoteProtocolError):
            body = {"stream": True, "messages": USER, "stream_options": {"include_usage": True}}
            with httpx.stream("POST", srv.base_url + "/chat/completions", json=body) as r:
                events.extend(line for line in r.iter_lines() if line.startswith("data: "))
    assert len(seen) <= 2 and all(c.usage is None for c in seen)
    assert len(events) <= 2 and not any("[DONE]" in e or "usage" in e for e in events)


@pytest.mark.parametrize("stream", [False, True])
def test_a_raw_body_is_sent_verbatim_streamed_or_not(stream: bool) -> None:
    with ScriptedServer([{"raw_body": "<html>not json"}, {"raw_body": '{"object": "list"}', "status": 201}]) as srv:
        garbage = post(srv, {"messages": USER, "stream": stream})
        other = post(srv, {"messages": USER})
    assert (garbage.status_code, garbage.content) == (200, b"<html>not json")
    assert garbage.headers["content-type"] == "application/json"
    assert (other.status_code, other.json()) == (201, {"object": "list"})


def test_stream_delay_paces_each_event() -> None:
    with ScriptedServer([{"content": "abc", "stream_chunks": 3, "stream_delay": 0.1}]) as srv:
        arrivals: list[float] = []
        started = time.monotonic()
        with httpx.stream("POST", srv.base_url + "/chat/completions", json={"messages": USER, "stream": True}) as r:
            arrivals += [time.monotonic() - started for line in r.iter_lines() if line.startswith("data: ")]
    assert len(arrivals) == 6  # role, three pieces, finish, [DONE]
    assert arrivals[0] >= 0.1 and arrivals[-1] >= 0.6  # the server sleeps before each event: hard lower bounds
    # spread out, not sent at once after one long sleep; 0.5 apart at the server, and the client may receive the first
    # late on a loaded machine (0.131 s once, under a bench on the other core: a gap of 0.4995)
    assert arrivals[-1] - arrivals[0] >= 0.4


def test_status_429_carries_headers_and_error_body(sdk: Sdk) -> None:
    entry = {"status": 429, "headers": {"retry-after": "0", "x-ratelimit-remaining-requests": "0"}}
    with ScriptedServer([entry, entry]) as srv:
        raw = post(srv, {"messages": USER})
        with pytest.raises(openai.RateLimitError) as caught:
            sdk(srv).chat.completions.create(model="m", messages=USER)
    assert raw.status_code == 429 and raw.headers["retry-after"] == "0"
    assert raw.json()["error"]["type"] == "rate_limit_error"
    assert caught.value.response.headers["x-ratelimit-remaining-requests"] == "0"
    assert caught.value.code == "rate_limit_exceeded"


def test_custom_error_fields_override_the_defaults(sdk: Sdk) -> None:
    entry = {"status": 503, "error": {"message": "overloaded, try later"}}
    with ScriptedServer([entry]) as srv:
        with pytest.raises(openai.InternalServerError) as caught:
            sdk(srv).chat.completions.create(model="m", messages=USER)
    assert caught.value.status_code == 503
    assert caught.value.body == {"message": "overloaded, try later", "type": "server_error", "code": None}


def test_delay_triggers_client_timeout_and_server_keeps_serving(sdk: Sdk) -> None:
    with ScriptedServer([{"content": "late", "delay": 2}, {"content": "on time"}]) as srv:
        started = time.monotonic()
        with pytest.raises(openai.APITimeoutError):
            sdk(srv, timeout=0.2).chat.completions.create(model="m", messages=USER)
        assert time.monotonic() - started < 1.5
        reply = sdk(srv).chat.completions.create(model="m", messages=USER)
        assert reply.choices[0].message.content == "on time"
        stopping = time.monotonic()
    assert time.monotonic() - stopping < 1.0  # stop() cuts the pending delay short


@pytest.mark.parametrize(
    ("entry", "body", "says"),
    (
        ({"expect": {"model": "x"}}, {"model": "y", "messages": USER}, "'model'"),
        ({"expect": {"model": "x"}}, {"messages": USER}, "'model'"),
        ({"expect": {"temperature": None}}, {"temperature": 0.2, "messages": USER}, "'temperature'"),
        ({"expect_contains": "traceback"}, {"messages": USER}, "traceback"),
    ),
)
def test_expectation_mismatch_answers_400(entry: dict[str, Any], body: dict[str, Any], says: str) -> None:
    with ScriptedServer([entry | {"content": "never"}]) as srv:
        response = post(srv, body)
    error = response.json()["error"]
    assert response.status_code == 400 and error["type"] == "script_expectation_failed"
    assert says in error["message"]


def test_met_expectations_answer_normally() -> None:
    entry = {
        "expect": {"model": "x", "temperature": None},
        "expect_contains": 'fix the "bug"\n',
        "content": "ok",
    }
    messages = [{"role": "user", "content": 'fix the "bug"\nplease'}]
    with ScriptedServer([entry]) as srv:
        response = post(srv, {"model": "x", "messages": messages})
    assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"] == "ok"


def test_exhausted_script_is_a_non_retryable_400(sdk: Sdk) -> None:
    with ScriptedServer([{"content": "only"}]) as srv:
        client = sdk(srv)
        client.chat.completions.create(model="m", messages=USER)
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="m", messages=USER)
        raw = post(srv, {"messages": USER})
    assert caught.value.type == "script_exhausted"
    assert raw.status_code == 400 and raw.json()["error"]["type"] == "script_exhausted"
    assert len(srv.requests) == 3 and srv.remaining == 0


def test_repeat_push_and_remaining() -> None:
    with ScriptedServer([{"content": "again", "repeat": 3}]) as srv:
        assert srv.remaining == 3
        answers = [post(srv, {"messages": USER}).json()["choices"][0]["message"]["content"] for _ in range(3)]
        assert srv.remaining == 0
        srv.push({"content": "pushed"}, {"content": "last"})
        assert srv.remaining == 2
        answers.append(post(srv, {"messages": USER}).json()["choices"][0]["message"]["content"])
        assert srv.remaining == 1
    assert answers == ["again", "again", "again", "pushed"]


def test_concurrent_requests_each_consume_one_entry() -> None:
    with ScriptedServer([{"tool_calls": [{"name": "f"}], "repeat": 16}]) as srv:
        with ThreadPoolExecutor(8) as pool:
            replies = list(pool.map(lambda _: post(srv, {"messages": USER}).json(), range(16)))
        ids = {r["choices"][0]["message"]["tool_calls"][0]["id"] for r in replies}
        assert ids == {f"call_{n}_0" for n in range(1, 17)} and srv.remaining == 0
        assert len(srv.requests) == 16


@pytest.mark.parametrize(
    "path",
    (
        "/v1/chat/completions",
        "/i/run/inst/v1/chat/completions",
        "/v1/chat/completions/",
        "/chat/completions?a=1",
    ),
)
def test_chat_route_accepts_any_prefix(path: str) -> None:
    with ScriptedServer([{"content": "routed"}]) as srv:
        origin = srv.base_url.removesuffix("/v1")
        response = httpx.post(origin + path, json={"messages": USER}, timeout=5)
    assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"] == "routed"


def test_proxy_prefix_with_the_sdk(sdk: Sdk) -> None:
    with ScriptedServer([{"content": "via proxy"}]) as srv:
        base = srv.base_url.removesuffix("/v1") + "/i/run/inst/v1"
        client = sdk(base)
        reply = client.chat.completions.create(model="m", messages=USER)
    assert reply.choices[0].message.content == "via proxy"
    assert srv.requests[0].path == "/i/run/inst/v1/chat/completions"


def test_models_route_and_unknown_routes(sdk: Sdk) -> None:
    with ScriptedServer(model="qwen-tiny") as srv:
        listed = sdk(srv).models.list()
        raw = httpx.get(srv.base_url.removesuffix("/v1") + "/proxy/v1/models", timeout=5).json()
        missing = httpx.get(srv.base_url + "/nothing", timeout=5)
        with httpx.Client(timeout=5) as client:  # keep-alive: a 404 must not leave its body unread
            wrong_method = client.post(srv.base_url + "/models", json={"messages": USER})
            again = client.get(srv.base_url + "/models")
        not_json = httpx.post(srv.base_url + "/chat/completions", content=b"[1, 2", timeout=5)
        assert srv.requests == []
    assert [m.id for m in listed.data] == ["qwen-tiny"]
    assert raw == {"object": "list", "data": [{"id": "qwen-tiny", "object": "model", "owned_by": "snaffle"}]}
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    assert wrong_method.status_code == 404 and again.status_code == 200
    assert not_json.status_code == 400


@pytest.mark.parametrize(
    ("name", "text"),
    (
        ("s.json", '[{"content": "one"}, {"tool_calls": [{"name": "f", "arguments": "{bad"}]}]'),
        (
            "s.json",
            '{"responses": [{"content": "one"}, {"tool_calls": [{"name": "f", "arguments": "{bad"}]}]}',
        ),
        ("s.yaml", "- content: one\n- tool_calls:\n    - name: f\n      arguments: '{bad'\n"),
        (
            "s.yml",
            "responses:\n  - content: one  # a comment\n  - tool_calls: [{name: f, arguments: '{bad'}]\n",
        ),
    ),
)
def test_load_script_reads_json_and_yaml(tmp_path: Path, name: str, text: str) -> None:
    (tmp_path / name).write_text(text)
    assert load_script(tmp_path / name) == [
        {"content": "one"},
        {"tool_calls": [{"name": "f", "arguments": "{bad"}]},
    ]


@pytest.mark.parametrize(
    ("text", "says"),
    (
        ('[{"contents": "typo"}]', "contents"),
        ('{"answers": []}', "responses"),
        ('[{"repeat": 0}]', "repeat"),
        ('[{"stream_delay": "slow"}]', "stream_delay"),
        ('[{"raw_body": 7}]', "raw_body"),
        ('[{"tool_calls": [{"arguments": {}}]}]', "name"),
        ('["just text"]', "mapping"),
    ),
)
def test_load_script_rejects_bad_scripts(tmp_path: Path, text: str, says: str) -> None:
    (tmp_path / "bad.json").write_text(text)
    with pytest.raises(ValueError, match=says):
        load_script(tmp_path / "bad.json")


def test_module_entry_point_serves_a_script_file(tmp_path: Path, sdk: Sdk) -> None:
    script = tmp_path / "script.yaml"
    script.write_text("- content: from a subprocess\n")
    command = [sys.executable, "-m", "snaffle.testing.scripted_server", str(script), "--host", "127.0.0.1"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        base_url = process.stdout.readline().strip()
        reply = sdk(base_url).chat.completions.create(
            model="m",
            messages=USER,
        )
    finally:
        process.kill()
        _, stderr = process.communicate(timeout=5)
    assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
    assert reply.choices[0].message.content == "from a subprocess"
    assert "Warning" not in stderr


def test_module_entry_point_reports_a_bad_script(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("[{")
    done = subprocess.run(
        [sys.executable, "-m", "snaffle.testing.scripted_server", str(tmp_path / "bad.json")],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert done.returncode == 2 and "scripted_server:" in done.stderr and done.stdout == ""


@pytest.mark.parametrize("host", ("0.0.0.0", "10.1.2.3", "example.com", "::", ""))
def test_non_loopback_bind_is_refused(host: str) -> None:
    with pytest.raises(ValueError, match="loopback"):
        ScriptedServer(host=host)


@pytest.mark.parametrize(("host", "bound"), (("localhost", "127.0.0.1"), ("127.0.0.2", "127.0.0.2"), ("::1", "::1")))
def test_loopback_hosts_are_accepted(host: str, bound: str) -> None:
    assert ScriptedServer(host=host).host == bound


def test_base_url_and_port_after_start() -> None:
    with ScriptedServer() as srv:
        assert srv.port > 0 and srv.base_url == f"http://127.0.0.1:{srv.port}/v1"
        with pytest.raises(RuntimeError):
            srv.start()


def test_stop_closes_idle_keep_alive_connections_and_restart_reuses_the_port() -> None:
    srv = ScriptedServer([{"content": "one"}, {"content": "two"}]).start()
    with httpx.Client(timeout=5) as client:
        assert client.post(srv.base_url + "/chat/completions", json={"messages": USER}).status_code == 200
        started = time.monotonic()
        srv.stop()
        assert time.monotonic() - started < 1.0
        base_url = srv.base_url
        with srv:
            assert srv.base_url == base_url
            reply = client.post(base_url + "/chat/completions", json={"messages": USER}).json()
    assert reply["choices"][0]["message"]["content"] == "two"
