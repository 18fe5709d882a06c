"""The shim's caps under concurrency and hostile input: the shim as a real process (`snaffle.shim.cli serve`) on
loopback, the scripted model server as its upstream."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from snaffle.shim.ledger import Ledger, LedgerRow
from snaffle.shim.pacer import estimate_prompt_tokens
from snaffle.testing import ScriptedServer

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parent.parent
USER = [{"role": "user", "content": "fix the bug"}]
PROMPT_TOKENS = estimate_prompt_tokens({"messages": USER})
"""7: the shim's prompt estimate, which the scripted server's prompt count matches (one message, cl100k)."""
PARALLEL = 10
OVERLAP_S = 0.5
"""Each upstream answer waits this long, so the parallel calls are all in flight at once."""


@dataclass(frozen=True)
class ShimProcess:
    """A shim serving in a process of its own, and its ledger."""

    url: str
    db: Path
    proc: subprocess.Popen[bytes]

    def base(self, run: str = "r", instance: str = "i") -> str:
        return f"{self.url}/i/{run}/{instance}/v1"

    def totals(self, run: str = "r", instance: str = "i") -> dict[str, Any]:
        return dict(httpx.get(f"{self.url}/ledger/{run}/{instance}", timeout=5).json())

    def rows(self) -> list[LedgerRow]:
        ledger = Ledger(self.db)
        try:
            return ledger.rows()
        finally:
            ledger.close()

    def peak_rss_kib(self) -> int:
        """The process's resident-memory high-water mark (Linux `VmHWM`)."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])


@contextmanager
def shim_process(upstream: ScriptedServer, tmp_path: Path, *flags: str) -> Iterator[ShimProcess]:
    """`snaffle shim serve --port 0 FLAGS...` in front of `upstream`; its URL is read from its announcement."""
    db, log = tmp_path / "ledger.sqlite", tmp_path / "shim.log"
    cmd = [sys.executable, "-m", "snaffle.shim.cli", "serve", "--upstream", upstream.base_url, "--db", str(db)]
    with log.open("wb") as sink:
        proc = subprocess.Popen([*cmd, "--port", "0", *flags], cwd=ROOT, stderr=sink)
    try:
        deadline = time.monotonic() + 15
        while "snaffle shim on " not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, f"the shim did not start: {log.read_text()}"
            time.sleep(0.02)
        url = log.read_text().split("snaffle shim on ", 1)[1].split(" ", 1)[0]
        httpx.get(f"{url}/healthz", timeout=5).raise_for_status()
        yield ShimProcess(url, db, proc)
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def upstream() -> Iterator[ScriptedServer]:
    with ScriptedServer([]) as server:
        yield server


def chat(base_url: str, stream: bool = False, timeout: float = 10, **extra: Any) -> httpx.Response:
    body = {"model": "gpt-4o", "messages": USER, "stream": stream, **extra}
    return httpx.post(f"{base_url}/chat/completions", json=body, timeout=timeout)


def in_parallel(call: Callable[[int], httpx.Response]) -> list[httpx.Response]:
    with ThreadPoolExecutor(PARALLEL) as pool:
        return list(pool.map(call, range(PARALLEL)))


def refusals(answers: list[httpx.Response]) -> list[str]:
    return [a.json()["error"]["type"] for a in answers if a.status_code == 429]


# -- caps under concurrency ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "extra"),
    [
        ((), {"max_tokens": 193}),  # the request's own max_tokens: its worst case is 7 + 193 = 200 tokens
        ((), {"max_completion_tokens": 193}),
        (("--reserve-output-tokens", "193"), {}),  # no max_tokens: the shim's reserve stands in for it
    ],
)
def test_parallel_calls_cannot_spend_past_the_token_cap(
    upstream: ScriptedServer, tmp_path: Path, flags: tuple[str, ...], extra: dict[str, Any]
) -> None:
    upstream.push({"content": "ok", "usage": {"completion_tokens": 193}, "delay": OVERLAP_S, "repeat": PARALLEL})
    with shim_process(upstream, tmp_path, "--max-tokens", "1000", *flags) as shim:
        answers = in_parallel(lambda n: chat(shim.base(), **extra))
        totals = shim.totals()
    assert sorted(a.status_code for a in answers) == [200] * 5 + [429] * 5
    assert refusals(answers) == ["budget_exceeded"] * 5
    assert len(upstream.requests) == 5
    assert totals["prompt_tokens"] + totals["completion_tokens"] == 5 * (PROMPT_TOKENS + 193) == 1000


@pytest.mark.parametrize(
    ("flag", "instance"),
    [("--max-dollars", lambda n: "i"), ("--run-max-dollars", lambda n: f"i{n}")],
)
def test_parallel_calls_cannot_spend_past_a_dollar_cap(
    upstream: ScriptedServer, tmp_path: Path, flag: str, instance: Callable[[int], str]
) -> None:
    # gpt-4o: $2.50 in, $10.00 out per M tokens; 7 + 48 tokens cost $0.0004975 at most, so 4 fit in $0.002
    upstream.push({"content": "ok", "usage": {"completion_tokens": 48}, "delay": OVERLAP_S, "repeat": PARALLEL})
    with shim_process(upstream, tmp_path, flag, "0.002") as shim:
        answers = in_parallel(lambda n: chat(shim.base("r", instance(n)), max_tokens=48))
        spent = sum(row.dollars for row in shim.rows())
    assert sorted(a.status_code for a in answers) == [200] * 4 + [429] * 6
    assert refusals(answers) == ["budget_exceeded"] * 6
    assert spent == pytest.approx(4 * (PROMPT_TOKENS * 2.5 + 48 * 10.0) / 1e6) and spent <= 0.002


def test_a_call_whose_worst_case_alone_exceeds_what_is_left_never_goes_upstream(
    upstream: ScriptedServer, tmp_path: Path
) -> None:
    rest = 800 - PROMPT_TOKENS
    upstream.push({"content": "ok", "usage": {"completion_tokens": 193}}, {"usage": {"completion_tokens": rest}})
    with shim_process(upstream, tmp_path, "--max-tokens", "1000") as shim:
        too_big = chat(shim.base(), max_tokens=2000)
        first = chat(shim.base(), max_tokens=193)  # 200 tokens: 800 left
        exactly = chat(shim.base(), max_tokens=rest)  # uses all 800
        over = chat(shim.base(), max_tokens=0)  # nothing is left
    assert (too_big.status_code, too_big.json()["error"]["type"]) == (429, "budget_exceeded")
    assert "max_tokens" in too_big.json()["error"]["message"] and too_big.headers["x-should-retry"] == "false"
    assert (first.status_code, exactly.status_code, over.status_code) == (200, 200, 429)
    assert [r.body["max_tokens"] for r in upstream.requests] == [193, rest]


def _broken_stream(shim: ShimProcess) -> None:
    with pytest.raises(httpx.RemoteProtocolError):
        chat(shim.base(), stream=True, max_tokens=900)


def _left_midstream(shim: ShimProcess) -> None:
    body = {"model": "gpt-4o", "messages": USER, "stream": True, "max_tokens": 900}
    with httpx.stream("POST", f"{shim.base()}/chat/completions", json=body, timeout=10) as response:
        assert b"data: " in next(response.iter_raw())


def _left_before_the_answer(shim: ShimProcess) -> None:
    with pytest.raises(httpx.ReadTimeout):
        chat(shim.base(), stream=True, timeout=0.3, max_tokens=900)


@pytest.mark.parametrize(
    ("entry", "leave"),
    [
        ({"content": "a b c d e f g h", "stream_chunks": 4, "cut_stream_after": 2}, _broken_stream),
        ({"content": "a b c d e f g h", "stream_chunks": 8, "stream_delay": 0.3}, _left_midstream),
        ({"content": "late", "delay": 1.0}, _left_before_the_answer),
    ],
)
def test_a_call_that_ends_badly_gives_its_reservation_back(
    upstream: ScriptedServer, tmp_path: Path, entry: dict[str, Any], leave: Callable[[ShimProcess], None]
) -> None:
    upstream.push(entry, {"content": "ok", "usage": {"completion_tokens": 5}})
    with shim_process(upstream, tmp_path, "--max-tokens", "1000") as shim:
        leave(shim)  # it held 907 of the 1000 tokens while in flight
        deadline = time.monotonic() + 10
        while shim.totals()["requests"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        after = chat(shim.base(), max_tokens=900)
    assert after.status_code == 200, after.text
    assert len(shim.rows()) == 2


# -- hostile input ------------------------------------------------------------------------------------------


BIG = 50 << 20


def _big_body() -> bytes:
    return b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "' + b"x" * BIG + b'"}]}'


@pytest.mark.parametrize("declared", [True, False])
def test_an_oversize_body_is_refused_with_413_and_never_buffered(
    upstream: ScriptedServer, tmp_path: Path, declared: bool
) -> None:
    body = _big_body()
    content = body if declared else (body[at : at + (1 << 20)] for at in range(0, len(body), 1 << 20))
    with shim_process(upstream, tmp_path) as shim:  # the default limit: 8 MiB
        before = shim.peak_rss_kib()
        response = httpx.post(
            f"{shim.base()}/chat/completions", content=content, headers={"content-type": "application/json"}
        )
        grew = shim.peak_rss_kib() - before
    assert response.status_code == 413, response.text
    assert response.json()["error"]["type"] == "request_too_large"
    assert "--max-body-bytes" in response.json()["error"]["message"]
    assert upstream.requests == []
    assert grew < 24 << 10, f"the shim's memory grew by {grew} KiB for a refused body"


def test_the_body_limit_is_a_flag(upstream: ScriptedServer, tmp_path: Path) -> None:
    upstream.push({"content": "ok"})
    with shim_process(upstream, tmp_path, "--max-body-bytes", "4096") as shim:
        small = chat(shim.base(), messages=[{"role": "user", "content": "x" * 3000}])
        large = chat(shim.base(), messages=[{"role": "user", "content": "x" * 5000}])
    assert (small.status_code, large.status_code) == (200, 413)
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("raw", ["<html>502 Bad Gateway</html>", '{"object": "list", "data": []}', "[1, 2]"])
def test_a_non_streamed_answer_that_is_not_a_chat_completion_is_a_502(
    upstream: ScriptedServer, tmp_path: Path, raw: str
) -> None:
    upstream.push({"raw_body": raw})
    with shim_process(upstream, tmp_path) as shim:
        response = chat(shim.base())
        totals = shim.totals()
        [row] = shim.rows()
    assert response.status_code == 502
    assert response.json()["error"]["type"] == "upstream_invalid_response"
    assert (row.status, row.error_type, row.usage_unknown) == (502, "upstream_invalid_response", True)
    assert (row.usage_estimated, row.prompt_tokens, row.completion_tokens) == (True, PROMPT_TOKENS, 0)
    assert (totals["calls"], totals["errors"], totals["usage_unknown"]) == (0, 1, 1)
