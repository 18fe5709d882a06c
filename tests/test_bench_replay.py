"""bench/replay.py against the scripted server over real HTTP: record, replay by occurrence, persist, pass through."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from snaffle.testing.scripted_server import ScriptedServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from replay import ReplayProxy, ReplayStore, request_key  # noqa: E402 - bench/ is not a package


def chat(base_url: str, content: str, **extra: Any) -> tuple[int, dict[str, Any]]:
    body = {"model": "m", "messages": [{"role": "user", "content": content}], **extra}
    request = urllib.request.Request(
        base_url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def text(answer: dict[str, Any]) -> str:
    return str(answer["choices"][0]["message"]["content"])


def test_same_requests_in_a_new_scope_get_the_recorded_answers_in_order(tmp_path: Path) -> None:
    script = [{"content": "first draw"}, {"content": "second draw"}, {"content": "other"}]
    with ScriptedServer(script) as server, ReplayProxy(server.base_url, ReplayStore(tmp_path / "r.jsonl")) as proxy:
        with proxy.scope() as stats:
            assert text(chat(proxy.base_url, "q", temperature=0.8)[1]) == "first draw"
            assert text(chat(proxy.base_url, "q", temperature=0.8)[1]) == "second draw"
        assert (stats.fresh, stats.replayed) == (2, 0)
        with proxy.scope() as again:
            # the same request twice: the 1st and 2nd recorded draws, in that order (common random numbers)
            assert text(chat(proxy.base_url, "q", temperature=0.8)[1]) == "first draw"
            assert text(chat(proxy.base_url, "q", temperature=0.8)[1]) == "second draw"
            assert text(chat(proxy.base_url, "a different prompt")[1]) == "other"
        assert (again.fresh, again.replayed) == (1, 2)
        assert again.replayed_s == pytest.approx(stats.model_s, abs=0.01)
        assert len(server.requests) == 3  # the upstream saw each distinct call once


def test_recordings_persist_and_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    with ScriptedServer([{"content": "kept"}]) as server, ReplayProxy(server.base_url, ReplayStore(path)) as proxy:
        with proxy.scope():
            chat(proxy.base_url, "q")
    with path.open("a") as handle:
        handle.write('{"key": "torn')
    with ScriptedServer([]) as server, ReplayProxy(server.base_url, ReplayStore(path)) as proxy:
        with proxy.scope() as stats:
            status, answer = chat(proxy.base_url, "q")
        assert (status, text(answer), stats.replayed, len(server.requests)) == (200, "kept", 1, 0)


def test_errors_are_passed_through_and_not_recorded(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    script = [{"status": 500, "error": {"message": "boom"}}, {"content": "after the error"}]
    with ScriptedServer(script) as server, ReplayProxy(server.base_url, ReplayStore(path)) as proxy:
        with proxy.scope():
            assert chat(proxy.base_url, "q")[0] == 500
        with proxy.scope() as stats:
            status, answer = chat(proxy.base_url, "q")
        assert (status, text(answer), stats.fresh) == (200, "after the error", 1)
    assert len(path.read_text().splitlines()) == 1


def test_streams_and_non_json_have_no_key() -> None:
    assert request_key("/v1/chat/completions", b'{"stream": true, "messages": []}') is None
    assert request_key("/v1/chat/completions", b"not json") is None
    # key order does not matter; the path does
    a = request_key("/v1/chat/completions", b'{"a": 1, "b": 2}')
    assert a == request_key("/v1/chat/completions", b'{"b": 2, "a": 1}')
    assert a != request_key("/v1/completions", b'{"a": 1, "b": 2}')


def test_an_unreachable_upstream_is_a_502_with_a_message(tmp_path: Path) -> None:
    with ScriptedServer([]) as server:
        dead = server.base_url
    with ReplayProxy(dead, ReplayStore(tmp_path / "r.jsonl")) as proxy, proxy.scope():
        status, answer = chat(proxy.base_url, "q")
    assert status == 502 and "replay proxy" in answer["error"]["message"]
