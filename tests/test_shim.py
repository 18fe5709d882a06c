"""The metering shim end to end: on loopback, with the scripted model server as its upstream."""

from __future__ import annotations

import argparse
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from snaffle.exceptions import UserError
from snaffle.shim.cli import config_from_args, register, run_serve
from snaffle.shim.cli import main as shim_main
from snaffle.shim.ledger import Ledger, LedgerRow
from snaffle.shim.pacer import estimate_prompt_tokens, estimate_text_tokens
from snaffle.shim.server import ShimConfig, ShimHandle, start_shim
from snaffle.testing import ScriptedServer
from snaffle.types import Limits

pytestmark = pytest.mark.timeout(30)

KEY_ENV = "SNAFFLE_TEST_UPSTREAM_KEY"
KEY = "sk-upstream-secret-7f3a9c"
USER = [{"role": "user", "content": "fix the bug"}]
USAGE = {"prompt_tokens": 1000, "completion_tokens": 500, "prompt_tokens_details": {"cached_tokens": 200}}
USAGE |= {"completion_tokens_details": {"reasoning_tokens": 100}}
GPT4O_DOLLARS = (800 * 2.50 + 200 * 1.25 + 500 * 10.00) / 1e6  # packaged pricing.toml, $/M tokens

StartShim = Callable[..., ShimHandle]


@pytest.fixture
def upstream() -> Iterator[ScriptedServer]:
    with ScriptedServer([]) as server:
        yield server


@pytest.fixture
def shim(upstream: ScriptedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StartShim]:
    """Start shims in front of `upstream` (keyword overrides of ShimConfig); all stop after the test."""
    monkeypatch.setenv(KEY_ENV, KEY)
    handles: list[ShimHandle] = []

    def start(**overrides: Any) -> ShimHandle:
        config = ShimConfig(upstream=upstream.base_url, db=tmp_path / "ledger.sqlite", api_key_env=KEY_ENV)
        handles.append(start_shim(replace(config, **overrides)))
        return handles[-1]

    yield start
    for handle in handles:
        handle.stop()


def chat(base_url: str, stream: bool = False, **extra: Any) -> httpx.Response:
    body = {"model": "gpt-4o", "messages": USER, "stream": stream, **extra}
    return httpx.post(f"{base_url}/chat/completions", json=body, timeout=10)


def events(response: httpx.Response) -> list[str]:
    return [line[len("data: ") :] for line in response.text.splitlines() if line.startswith("data: ")]


def rows(tmp_path: Path) -> list[LedgerRow]:
    ledger = Ledger(tmp_path / "ledger.sqlite")
    try:
        return ledger.rows()
    finally:
        ledger.close()


def test_non_streaming_call_is_metered_into_headers_and_ledger(
    shim: StartShim, upstream: ScriptedServer, tmp_path: Path
) -> None:
    upstream.push({"content": "done", "usage": USAGE})
    handle = shim()
    response = chat(handle.base_url_for("run1", "inst1"))
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "done"
    headers = response.headers
    assert (headers["x-snaffle-calls"], headers["x-snaffle-prompt-tokens"]) == ("1", "1000")
    assert (headers["x-snaffle-completion-tokens"], headers["x-snaffle-cached-tokens"]) == ("500", "200")
    assert headers["x-snaffle-reasoning-tokens"] == "100"
    assert float(headers["x-snaffle-dollars"]) == pytest.approx(GPT4O_DOLLARS)
    [row] = rows(tmp_path)
    assert (row.run, row.instance, row.call, row.model, row.status, row.stream) == (
        "run1",
        "inst1",
        1,
        "gpt-4o",
        200,
        False,
    )
    assert (row.prompt_tokens, row.completion_tokens, row.cached_tokens, row.reasoning_tokens) == (1000, 500, 200, 100)
    assert row.dollars == pytest.approx(GPT4O_DOLLARS)
    assert row.latency_ms > 0 and row.ttfb_ms is not None and not row.usage_unknown and row.error_type is None


def test_streaming_hides_the_forced_usage_chunk_but_meters_it(
    shim: StartShim, upstream: ScriptedServer, tmp_path: Path
) -> None:
    upstream.push({"content": "abcdef", "stream_chunks": 3, "usage": USAGE})
    response = chat(shim().base_url_for("r", "i"), stream=True)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    data = events(response)
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert all(chunk.get("usage") is None for chunk in chunks)
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "abcdef"
    assert upstream.requests[0].body["stream_options"] == {"include_usage": True}
    [row] = rows(tmp_path)
    assert (row.stream, row.prompt_tokens, row.completion_tokens, row.usage_unknown) == (True, 1000, 500, False)
    assert row.ttfb_ms is not None and row.bytes > 0


def test_streaming_forces_usage_while_keeping_the_clients_other_stream_options(
    shim: StartShim, upstream: ScriptedServer
) -> None:
    upstream.push({"content": "abc", "usage": USAGE})
    options = {"include_usage": False, "continuous_usage_stats": False}
    response = chat(shim().base_url_for("r", "i"), stream=True, stream_options=options)
    data = events(response)
    assert data[-1] == "[DONE]" and all(json.loads(d).get("usage") is None for d in data[:-1])
    assert upstream.requests[0].body["stream_options"] == {"include_usage": True, "continuous_usage_stats": False}


def test_streaming_keeps_the_usage_chunk_when_the_client_asked(shim: StartShim, upstream: ScriptedServer) -> None:
    upstream.push({"content": "abc", "usage": USAGE})
    response = chat(shim().base_url_for("r", "i"), stream=True, stream_options={"include_usage": True})
    data = events(response)
    assert data[-1] == "[DONE]"
    last = json.loads(data[-2])
    assert last["choices"] == [] and last["usage"]["prompt_tokens"] == 1000


def test_openai_sdk_streams_through_the_shim(shim: StartShim, upstream: ScriptedServer) -> None:
    upstream.push({"content": "hello world", "usage": USAGE})
    client = openai.OpenAI(base_url=shim().base_url_for("r", "i"), api_key="client-key", max_retries=0)
    stream = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "fix the bug"}], stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "hello world"


def test_a_stream_cut_midway_records_an_estimate_marked_as_such(
    shim: StartShim, upstream: ScriptedServer, tmp_path: Path
) -> None:
    words = " ".join(f"word{i}" for i in range(40))
    upstream.push({"content": words, "stream_chunks": 4, "cut_stream_after": 2}, {"content": "next"})
    handle = shim()
    with pytest.raises(httpx.RemoteProtocolError):
        chat(handle.base_url_for("r", "i"), stream=True)
    [row] = rows(tmp_path)
    assert (row.status, row.usage_unknown, row.usage_estimated, row.error_type) == (200, True, True, "stream_broken")
    assert row.prompt_tokens == estimate_prompt_tokens({"messages": USER})
    delivered = words[: -(-len(words) // 4)]  # the role delta and the first of 4 content pieces, then the cut
    assert row.completion_tokens == estimate_text_tokens(delivered)
    assert row.bytes > 0
    after = chat(handle.base_url_for("r", "i"))
    assert after.status_code == 200
    assert (after.headers["x-snaffle-calls"], after.headers["x-snaffle-usage-unknown"]) == ("1", "1")
    totals = Ledger(tmp_path / "ledger.sqlite").totals("r", "i")
    assert totals.usage_estimated == 1 and totals.usage.completion_tokens > row.completion_tokens


@pytest.mark.parametrize(("status", "stream"), [(429, False), (500, False), (429, True), (500, True)])
def test_upstream_errors_pass_through_with_their_status(
    shim: StartShim, upstream: ScriptedServer, tmp_path: Path, status: int, stream: bool
) -> None:
    upstream.push({"status": status, "headers": {"Retry-After": "7"}})
    response = chat(shim().base_url_for("r", "i"), stream=stream)
    assert response.status_code == status
    assert response.headers["retry-after"] == "7"
    assert response.json()["error"]["message"].startswith(f"scripted HTTP {status}")
    [row] = rows(tmp_path)
    assert (row.status, row.error_type, row.usage_unknown) == (status, f"upstream_{status}", False)


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_timeout_answers_504(
    shim: StartShim, upstream: ScriptedServer, tmp_path: Path, stream: bool
) -> None:
    upstream.push({"content": "late", "delay": 2.0})
    response = chat(shim(upstream_timeout_s=0.3).base_url_for("r", "i"), stream=stream)
    assert response.status_code == 504
    assert response.json()["error"]["type"] == "upstream_timeout"
    [row] = rows(tmp_path)
    assert (row.status, row.error_type) == (504, "upstream_timeout")


def test_an_unreachable_upstream_answers_502(shim: StartShim, tmp_path: Path) -> None:
    with ScriptedServer([]) as gone:
        url = gone.base_url
    response = chat(shim(upstream=url).base_url_for("r", "i"))
    assert response.status_code == 502 and response.json()["error"]["type"] == "upstream_unavailable"
    assert rows(tmp_path)[0].error_type == "upstream_unavailable"


LIMIT_CASES = [
    # (limits, refused call, refusal type); each call uses 15 tokens and costs $0.0000775 (gpt-4o); the shim holds
    # only each call's prompt estimate while it is in flight (its output reserve is tested in test_shim_caps.py)
    (Limits(max_turns=2), 3, "max_turns_exceeded"),
    (Limits(max_tokens=40), 4, "budget_exceeded"),
    (Limits(max_dollars=0.0001), 3, "budget_exceeded"),
]


@pytest.mark.parametrize(("limits", "refused_at", "kind"), LIMIT_CASES)
def test_each_limit_refuses_at_the_right_call(
    shim: StartShim, upstream: ScriptedServer, tmp_path: Path, limits: Limits, refused_at: int, kind: str
) -> None:
    upstream.push({"content": "ok", "usage": {"prompt_tokens": 10, "completion_tokens": 5}, "repeat": 10})
    base = shim(limits=limits, reserve_output_tokens=0).base_url_for("r", "i")
    statuses = [chat(base).status_code for _ in range(refused_at - 1)]
    assert statuses == [200] * (refused_at - 1)
    refused = chat(base)
    assert refused.status_code == 429
    assert refused.json()["error"]["type"] == kind
    assert refused.headers["x-should-retry"] == "false" and refused.headers["x-snaffle-refused"] == kind
    assert len(upstream.requests) == refused_at - 1
    assert rows(tmp_path)[-1].error_type == kind


def test_the_run_dollar_limit_spans_instances(shim: StartShim, upstream: ScriptedServer) -> None:
    upstream.push({"content": "ok", "usage": {"prompt_tokens": 1000, "completion_tokens": 0}, "repeat": 5})
    handle = shim(run_max_dollars=0.005, reserve_output_tokens=0)  # $0.0025 per call
    assert chat(handle.base_url_for("run", "a")).status_code == 200
    assert chat(handle.base_url_for("run", "b")).status_code == 200
    refused = chat(handle.base_url_for("run", "c"))
    assert (refused.status_code, refused.json()["error"]["type"]) == (429, "budget_exceeded")
    assert chat(handle.base_url_for("other-run", "a")).status_code == 200


def test_the_wall_clock_limit_counts_from_the_first_call(shim: StartShim, upstream: ScriptedServer) -> None:
    upstream.push({"content": "ok", "repeat": 3})
    handle = shim(limits=Limits(timeout_s=0.5))
    assert chat(handle.base_url_for("r", "slow")).status_code == 200
    assert chat(handle.base_url_for("r", "fresh")).status_code == 200  # its clock starts at its own first call
    time.sleep(0.6)
    refused = chat(handle.base_url_for("r", "slow"))
    assert (refused.status_code, refused.json()["error"]["type"]) == (429, "timeout")


def test_limits_survive_a_restart_of_the_shim(shim: StartShim, upstream: ScriptedServer) -> None:
    upstream.push({"content": "ok", "repeat": 3})
    first = shim(limits=Limits(max_turns=2))
    assert chat(first.base_url_for("r", "i")).status_code == 200
    first.stop()
    second = shim(limits=Limits(max_turns=2))
    assert chat(second.base_url_for("r", "i")).headers["x-snaffle-call"] == "2"
    assert chat(second.base_url_for("r", "i")).json()["error"]["type"] == "max_turns_exceeded"


def test_the_pacer_holds_max_in_flight_under_concurrent_clients(shim: StartShim, upstream: ScriptedServer) -> None:
    upstream.push({"content": "ok", "delay": 0.2, "repeat": 8})
    handle = shim(max_in_flight=2)
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda n: chat(handle.base_url_for("r", f"i{n}")), range(8)))
    assert [a.status_code for a in answers] == [200] * 8
    assert time.monotonic() - started >= 4 * 0.2  # 8 calls, 2 at a time
    health = httpx.get(f"{handle.url}/healthz").json()
    assert (health["peak_in_flight"], health["in_flight"], health["waiting"]) == (2, 0, 0)


def test_a_request_that_would_wait_past_its_wall_clock_is_refused(
    shim: StartShim, upstream: ScriptedServer, tmp_path: Path
) -> None:
    upstream.push({"content": "ok"}, {"content": "slow", "delay": 1.5}, {"content": "ok"})
    handle = shim(max_in_flight=1, limits=Limits(timeout_s=0.6))
    base = handle.base_url_for("r", "waiter")
    assert chat(base).status_code == 200  # starts the instance's clock
    blocker = threading.Thread(target=chat, args=(handle.base_url_for("r", "hog"),))
    blocker.start()
    time.sleep(0.2)
    refused = chat(base)  # the hog holds the only slot past this instance's 0.6 s
    blocker.join()
    assert (refused.status_code, refused.json()["error"]["type"]) == (429, "timeout")
    assert len(upstream.requests) == 2


def test_the_api_key_goes_upstream_only(
    shim: StartShim, upstream: ScriptedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    upstream.push({"content": "ok"}, {"status": 500}, {"content": "abcdef", "cut_stream_after": 1})
    handle = shim()
    base = handle.base_url_for("r", "i")
    client_headers = {"authorization": "Bearer client-secret"}
    answers = [httpx.post(f"{base}/chat/completions", json={"model": "m", "messages": USER}, headers=client_headers)]
    answers.append(chat(base))
    with pytest.raises(httpx.RemoteProtocolError):
        chat(base, stream=True)
    answers += [httpx.get(f"{base}/models"), httpx.get(handle.ledger_url("r", "i"))]
    handle.stop()
    assert [r.headers["authorization"] for r in upstream.requests] == [f"Bearer {KEY}"] * 3
    assert KEY not in caplog.text and "usage unknown" in caplog.text
    for answer in answers:
        assert KEY not in answer.text and KEY not in str(answer.headers)
    for path in tmp_path.iterdir():
        assert KEY.encode() not in path.read_bytes(), path


def test_a_missing_key_variable_is_a_user_error(shim: StartShim, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(UserError, match=KEY_ENV):
        shim()


@pytest.mark.parametrize(("host", "allow_remote", "token"), [("0.0.0.0", False, None), ("0.0.0.0", True, None)])
def test_a_non_loopback_bind_is_refused(
    shim: StartShim, host: str, allow_remote: bool, token: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(UserError, match="--allow-remote"):
        shim(host=host, allow_remote=allow_remote, token=token)
    assert shim_main(["serve", "--upstream", "http://127.0.0.1:9/v1", "--db", "x.db", "--host", host]) == 2
    assert "refusing to bind" in capsys.readouterr().err


def test_a_remote_bind_needs_the_token(shim: StartShim, upstream: ScriptedServer) -> None:
    upstream.push({"content": "ok"})
    handle = shim(host="0.0.0.0", allow_remote=True, token="shim-token")
    base = handle.base_url_for("r", "i").replace("0.0.0.0", "127.0.0.1")
    denied = chat(base)
    assert denied.status_code == 401
    body = {"model": "m", "messages": USER}
    allowed = httpx.post(f"{base}/chat/completions", json=body, headers={"authorization": "Bearer shim-token"})
    assert allowed.status_code == 200
    assert upstream.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_unprefixed_routes_serve_the_default_instance(shim: StartShim, upstream: ScriptedServer) -> None:
    upstream.push({"content": "ok"})
    handle = shim()
    assert chat(f"{handle.url}/v1").status_code == 200
    models = httpx.get(f"{handle.url}/v1/models")
    assert models.json()["data"][0]["id"] == "scripted" and models.headers["x-snaffle-calls"] == "1"
    totals = httpx.get(handle.ledger_url("default", "default")).json()
    assert (totals["calls"], totals["requests"]) == (1, 1)
    assert upstream.requests[0].path == "/v1/chat/completions"


def test_the_ledger_route_reports_cumulative_usage(shim: StartShim, upstream: ScriptedServer) -> None:
    upstream.push({"content": "ok", "usage": USAGE, "repeat": 2}, {"status": 500})
    handle = shim()
    for _ in range(3):
        chat(handle.base_url_for("r", "i"))
    totals = httpx.get(handle.ledger_url("r", "i")).json()
    assert (totals["requests"], totals["calls"], totals["errors"], totals["refused"]) == (3, 2, 1, 0)
    assert (totals["prompt_tokens"], totals["cached_tokens"]) == (2000, 400)
    assert totals["dollars"] == pytest.approx(2 * GPT4O_DOLLARS)


def test_an_invalid_body_is_refused_without_reaching_upstream(shim: StartShim, upstream: ScriptedServer) -> None:
    response = httpx.post(f"{shim().base_url_for('r', 'i')}/chat/completions", content=b"[1, 2")
    assert response.status_code == 400 and response.headers["x-snaffle-calls"] == "0"
    assert upstream.requests == []


def test_a_deeply_nested_body_is_refused_as_invalid(shim: StartShim, upstream: ScriptedServer) -> None:
    response = httpx.post(f"{shim().base_url_for('r', 'i')}/chat/completions", content=b"[" * 100_000)
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"
    assert upstream.requests == []


def test_a_client_leaving_midstream_closes_the_upstream_and_still_writes_a_row(shim: StartShim, tmp_path: Path) -> None:
    upstream_closed = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))

    def slow_upstream() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        event = b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'
        conn.sendall(b"%x\r\n%s\r\n" % (len(event), event))
        conn.settimeout(10)
        try:
            if conn.recv(1) == b"":
                upstream_closed.set()
        except OSError:
            upstream_closed.set()
        conn.close()

    thread = threading.Thread(target=slow_upstream, daemon=True)
    thread.start()
    handle = shim(upstream=f"http://127.0.0.1:{listener.getsockname()[1]}/v1")
    body = {"model": "gpt-4o", "messages": USER, "stream": True}
    with httpx.stream("POST", f"{handle.base_url_for('r', 'i')}/chat/completions", json=body) as response:
        assert b"hi" in next(response.iter_raw())
    assert upstream_closed.wait(5), "the shim kept the upstream stream open after its client left"
    thread.join()
    listener.close()
    deadline = time.monotonic() + 5
    while not rows(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.02)
    [row] = rows(tmp_path)
    assert (row.error_type, row.usage_unknown, row.status) == ("client_disconnected", True, 200)
    assert row.usage_estimated and row.prompt_tokens > 0 and row.completion_tokens > 0  # "hi" was relayed
    assert row.bytes > 0


def test_the_cli_registers_shim_serve() -> None:
    parser = argparse.ArgumentParser(prog="snaffle")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["shim", "serve", "--upstream", "http://h/v1", "--db", "l.db", "--max-turns", "3", "--timeout", "60"]
    )
    assert args.func is run_serve
    config = config_from_args(args)
    assert (config.upstream, config.db, config.port, config.host) == ("http://h/v1", Path("l.db"), 8765, "127.0.0.1")
    assert config.limits == Limits(max_turns=3, timeout_s=60.0)
    assert (config.reserve_output_tokens, config.max_body_bytes) == (4096, 8 << 20)
    flags = ["--reserve-output-tokens", "0", "--max-body-bytes", "1000"]
    changed = config_from_args(parser.parse_args(["shim", "serve", "--upstream", "u", "--db", "d", *flags]))
    assert (changed.reserve_output_tokens, changed.max_body_bytes) == (0, 1000)
    assert parser.parse_args(["shim"]).func(args) == 2  # `snaffle shim` alone prints its help


def test_the_token_bucket_holds_a_request_until_real_usage_frees_tokens(
    shim: StartShim, upstream: ScriptedServer
) -> None:
    upstream.push({"content": "ok", "delay": 0.4, "repeat": 2})
    handle = shim(tokens_per_minute=20_000)
    base = handle.base_url_for("r", "i")
    started = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(chat, base, max_tokens=15_000)  # estimated at ~15,000 tokens, really uses ~10
        time.sleep(0.1)
        second = pool.submit(chat, base, messages=[{"role": "user", "content": "word " * 8000}])  # ~8,000
        answers = [first.result(), second.result()]
    assert [a.status_code for a in answers] == [200, 200]
    assert time.monotonic() - started >= 0.8  # the second waited for the first's real usage
    assert [len(r.body["messages"][0]["content"]) for r in upstream.requests] == [len("fix the bug"), 40_000]
