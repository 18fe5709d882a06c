"""The shim's parts on their own: pricing, limits, pacer, ledger, and the lean transport."""

from __future__ import annotations

import asyncio
import logging
import random
import sqlite3
from collections.abc import AsyncGenerator
from pathlib import Path

import httpx
import pytest
from starlette.requests import ClientDisconnect
from starlette.types import Message

from snaffle.exceptions import UserError
from snaffle.shim.app import RelayResponse
from snaffle.shim.config import ShimConfig, is_loopback
from snaffle.shim.ledger import COLUMNS, MIGRATIONS, Ledger, LedgerRow, Totals, migrate
from snaffle.shim.limits import Hold, check, remaining
from snaffle.shim.pacer import Pacer, PacerTimeout, asked_completion_tokens, estimate_tokens
from snaffle.shim.pricing import load_pricing, parse_pricing
from snaffle.shim.transport import Dechunker, LeanTransport
from snaffle.shim.wire import inspect_event, parse_usage, split_events
from snaffle.testing import ScriptedServer
from snaffle.types import Limits, Usage

# -- pricing ------------------------------------------------------------------------------------------------


TABLE = """
[models."gpt-4o"]
input = 2.50
cached_input = 1.25
output = 10.00

[models."gpt-4o-mini"]
input = 0.15
output = 0.60
"""


@pytest.mark.parametrize(
    ("model", "priced_as"),
    [
        ("gpt-4o", "gpt-4o"),
        ("openai/gpt-4o", "gpt-4o"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("gpt-4", None),
    ],
)
def test_a_model_is_priced_by_exact_name_then_provider_then_dated_prefix(model: str, priced_as: str | None) -> None:
    pricing = parse_pricing(TABLE)
    assert pricing.price(model) == (None if priced_as is None else pricing.models[priced_as])


def test_dollars_charge_cached_tokens_at_the_cached_rate() -> None:
    pricing = parse_pricing(TABLE)
    usage = Usage(prompt_tokens=1000, completion_tokens=100, cached_tokens=400, reasoning_tokens=50)
    assert pricing.dollars("gpt-4o", usage) == pytest.approx((600 * 2.5 + 400 * 1.25 + 100 * 10) / 1e6)
    assert pricing.models["gpt-4o-mini"].cached_input == 0.15  # defaults to the input price


def test_an_unknown_model_costs_unknown_not_nothing_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="snaffle.shim")
    pricing = parse_pricing(TABLE)
    for _ in range(3):
        assert pricing.dollars("mystery-model", Usage(100, 100)) is None
    assert pricing.warned == {"mystery-model"}
    assert caplog.text.count("mystery-model") == 1 and "recorded as unknown" in caplog.text


def test_the_packaged_pricing_table_loads() -> None:
    pricing = load_pricing(None)
    assert pricing.price("gpt-4o-mini") is not None and pricing.price("local") is not None
    assert all(p.input >= 0 and p.output >= 0 and p.cached_input <= p.input for p in pricing.models.values())


@pytest.mark.parametrize(
    ("text", "match"),
    [("[models.x\ninput=1", "not valid TOML"), ('[models."x"]\ninput = 1\n', "numeric `input` and `output`")],
)
def test_a_bad_pricing_file_is_a_user_error(text: str, match: str) -> None:
    with pytest.raises(UserError, match=match):
        parse_pricing(text)


def test_a_missing_pricing_file_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="--pricing"):
        load_pricing(tmp_path / "nope.toml")


# -- limits -------------------------------------------------------------------------------------------------


def totals(calls: int = 0, tokens: int = 0, dollars: float = 0.0) -> Totals:
    return Totals(requests=calls, calls=calls, usage=Usage(prompt_tokens=tokens, dollars=dollars))


@pytest.mark.parametrize(
    ("limits", "state", "reserved", "run", "expected"),
    [
        (Limits(), totals(99, 10**9, 1e6), 5, (1e6, 0.0), None),  # 0 means off
        (Limits(max_turns=3), totals(2), 0, (0.0, 0.0), None),
        (Limits(max_turns=3), totals(3), 0, (0.0, 0.0), "max_turns_exceeded"),
        (Limits(max_turns=3), totals(2), 1, (0.0, 0.0), "max_turns_exceeded"),  # an in-flight call holds a turn
        (Limits(max_tokens=100), totals(1, 99), 0, (0.0, 0.0), None),
        (Limits(max_tokens=100), totals(1, 100), 0, (0.0, 0.0), "budget_exceeded"),
        (Limits(max_dollars=1.0), totals(1, dollars=0.99), 0, (0.0, 0.0), None),
        (Limits(max_dollars=1.0), totals(1, dollars=1.0), 0, (0.0, 0.0), "budget_exceeded"),
        (Limits(), totals(), 0, (4.99, 5.0), None),
        (Limits(), totals(), 0, (5.0, 5.0), "budget_exceeded"),  # (run dollars, run max dollars)
    ],
)
def test_check_refuses_exactly_at_each_limit(
    limits: Limits, state: Totals, reserved: int, run: tuple[float, float], expected: str | None
) -> None:
    refusal = check(limits, state, held=Hold(reserved), run_dollars=run[0], run_max_dollars=run[1], now=10.0)
    assert (refusal.type if refusal else None) == expected


TOKENS_1000, DOLLARS_1, NO_RUN_CAP = Limits(max_tokens=1000), Limits(max_dollars=1.0), (0.0, 0.0)


@pytest.mark.parametrize(
    ("limits", "state", "held", "worst", "run", "expected"),
    [
        (TOKENS_1000, totals(1, 600), Hold(1, 200), Hold(1, 200), NO_RUN_CAP, None),  # fits exactly
        (TOKENS_1000, totals(1, 600), Hold(1, 200), Hold(1, 201), NO_RUN_CAP, "budget_exceeded"),
        (TOKENS_1000, totals(), Hold(), Hold(1, 1001), NO_RUN_CAP, "budget_exceeded"),  # too big on its own
        (TOKENS_1000, totals(), Hold(3, 1000), Hold(1, 0), NO_RUN_CAP, "budget_exceeded"),  # held by calls in flight
        (DOLLARS_1, totals(1, dollars=0.5), Hold(1, 0, 0.25), Hold(1, 0, 0.25), NO_RUN_CAP, None),
        (DOLLARS_1, totals(1, dollars=0.5), Hold(1, 0, 0.25), Hold(1, 0, 0.26), NO_RUN_CAP, "budget_exceeded"),
        (Limits(), totals(), Hold(), Hold(1, 0, 0.5), (4.5, 5.0), None),  # (run dollars spent or held, run max)
        (Limits(), totals(), Hold(), Hold(1, 0, 0.51), (4.5, 5.0), "budget_exceeded"),
        (Limits(), totals(99, 10**9, 1e6), Hold(50, 10**9, 1e6), Hold(1, 10**9, 1e6), (1e6, 0.0), None),  # off
    ],
)
def test_check_holds_each_call_in_flight_at_its_worst_case(
    limits: Limits, state: Totals, held: Hold, worst: Hold, run: tuple[float, float], expected: str | None
) -> None:
    refusal = check(limits, state, held=held, worst=worst, run_dollars=run[0], run_max_dollars=run[1], now=10.0)
    assert (refusal.type if refusal else None) == expected


def test_a_call_too_big_for_what_is_left_is_told_how_to_fit() -> None:
    refusal = check(Limits(max_tokens=1000), totals(1, 900), worst=Hold(1, 4103))
    assert refusal is not None and "4103 tokens" in refusal.message and "100 tokens left" in refusal.message
    assert "max_tokens" in refusal.message and "--reserve-output-tokens" in refusal.message


def test_a_hold_given_back_by_every_call_in_flight_leaves_nothing() -> None:
    calls = [Hold(1, 7, 0.1), Hold(1, 9, 0.2), Hold(1, 4096, 0.7)]
    held = Hold()
    for call in calls:
        held += call
    assert held == Hold(3, 4112, 0.1 + 0.2 + 0.7)
    for call in calls:
        held -= call
    assert held == Hold()  # exactly: no float dust


@pytest.mark.parametrize(
    ("payload", "asked"),
    [
        ({}, None),
        ({"max_tokens": 100}, 100),
        ({"max_completion_tokens": 50, "max_tokens": 100}, 50),
        ({"max_tokens": 0}, 0),
        ({"max_tokens": "100"}, None),
        ({"max_tokens": True}, None),
        ({"max_tokens": -1}, None),
    ],
)
def test_the_asked_completion_is_a_count_or_none(payload: dict[str, object], asked: int | None) -> None:
    assert asked_completion_tokens(payload) == asked


@pytest.mark.parametrize(
    ("started", "now", "expected"), [(None, 50.0, None), (100.0, 129.0, None), (100.0, 130.0, "timeout")]
)
def test_the_wall_clock_runs_from_the_first_call(started: float | None, now: float, expected: str | None) -> None:
    refusal = check(Limits(timeout_s=30), totals(), started=started, now=now)
    assert (refusal.type if refusal else None) == expected
    assert remaining(Limits(), totals().first_ts, now) is None


# -- pacer --------------------------------------------------------------------------------------------------


def test_the_pacer_admits_fifo_within_max_in_flight() -> None:
    async def scenario() -> list[int]:
        pacer = Pacer(max_in_flight=2)
        order: list[int] = []

        async def call(n: int) -> None:
            ticket = await pacer.acquire()
            order.append(n)
            assert pacer.in_flight <= 2
            await asyncio.sleep(0.01)
            pacer.release(ticket)

        await asyncio.gather(*(call(n) for n in range(10)))
        assert pacer.peak_in_flight == 2 and pacer.in_flight == 0 and pacer.waiting == 0
        return order

    assert asyncio.run(scenario()) == list(range(10))


def test_a_request_that_cannot_be_admitted_in_time_is_refused_and_leaves_the_queue() -> None:
    async def scenario() -> None:
        pacer = Pacer(max_in_flight=1)
        held = await pacer.acquire()
        with pytest.raises(PacerTimeout):
            await pacer.acquire(timeout=0.05)
        with pytest.raises(PacerTimeout):
            await pacer.acquire(timeout=0)
        assert pacer.waiting == 0
        pacer.release(held)
        assert pacer.in_flight == 0
        await pacer.acquire(timeout=0.05)

    asyncio.run(scenario())


def test_the_token_bucket_waits_for_refill_and_is_corrected_by_real_usage() -> None:
    now = [0.0]
    pacer = Pacer(tokens_per_minute=600, clock=lambda: now[0])  # 10 tokens per second

    async def scenario() -> None:
        first = await pacer.acquire(500)
        assert pacer._admissible(100) is True and pacer._admissible(101) is False
        pacer.release(first, actual_tokens=100)  # over-estimated by 400: credited back
        assert pacer._admissible(500)
        big = await pacer.acquire(500)
        pacer.release(big, actual_tokens=1100)  # under-estimated: the bucket goes into debt
        assert not pacer._admissible(1)
        now[0] += 60.0
        assert not pacer._admissible(1)  # a minute of refill only paid the 600-token debt back
        now[0] += 120.0
        assert pacer._admissible(600) and pacer._tokens == 600  # refilled, capped at one minute's worth
        huge = await pacer.acquire(5000)  # bigger than the bucket: goes when the bucket is full
        pacer.release(huge, actual_tokens=5000)

    asyncio.run(scenario())


def test_a_waiting_request_is_admitted_when_the_bucket_refills() -> None:
    async def scenario() -> float:
        pacer = Pacer(tokens_per_minute=6000)  # 100 tokens per second, real clock
        await pacer.acquire(6000)
        started = asyncio.get_running_loop().time()
        await pacer.acquire(20, timeout=2.0)
        return asyncio.get_running_loop().time() - started

    assert 0.1 <= asyncio.run(scenario()) < 1.0


def test_the_token_estimate_counts_messages_tools_and_max_tokens() -> None:
    small = estimate_tokens({"messages": [{"role": "user", "content": "hello world"}]})
    assert small == 2 + 4
    bigger = estimate_tokens(
        {
            "messages": [{"role": "user", "content": "hello world " * 100}],
            "tools": [{"type": "function", "function": {"name": "read_entity"}}],
            "max_tokens": 256,
        }
    )
    assert 200 + 256 < bigger < 260 + 256 + 20


# -- ledger -------------------------------------------------------------------------------------------------


def row(call: int, status: int = 200, error: str | None = None, tokens: int = 10) -> LedgerRow:
    return LedgerRow(
        ts=1000.0 + call,
        run="r",
        instance="i",
        call=call,
        model="m",
        stream=False,
        status=status,
        latency_ms=1.0,
        ttfb_ms=0.5,
        prompt_tokens=tokens,
        completion_tokens=1,
        dollars=0.01,
        error_type=error,
    )


def test_ledger_rows_persist_and_totals_match_the_fold(tmp_path: Path) -> None:
    written = [row(1), row(2, 500, "upstream_500", 0), row(3, 429, "budget_exceeded", 0), row(4)]
    ledger = Ledger(tmp_path / "l.sqlite")
    for item in written:
        ledger.append(item)
    ledger.close()
    reopened = Ledger(tmp_path / "l.sqlite")
    assert reopened.rows() == written and reopened.rows("r", "i") == written and reopened.rows("other") == []
    folded = Totals()
    for item in written:
        folded = folded.add(item)
    assert reopened.totals("r", "i") == folded
    assert (folded.requests, folded.calls, folded.errors, folded.refused) == (4, 2, 1, 1)
    assert reopened.run_dollars("r") == pytest.approx(0.04)
    reopened.close()


def test_the_ledger_is_append_only_and_migrates_once(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "l.sqlite")
    ledger.append(row(1))
    ledger.close()
    conn = sqlite3.connect(tmp_path / "l.sqlite")
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert [name for (name,) in conn.execute("SELECT name FROM _migrations")] == [n for n, _ in MIGRATIONS]
    assert migrate(conn) == []
    for statement in ("UPDATE calls SET dollars = 0", "DELETE FROM calls"):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(statement)
    conn.close()


def test_a_ledger_from_before_usage_estimates_migrates_and_keeps_its_rows(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "old.sqlite")
    conn.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    for name, sql in MIGRATIONS[:2]:  # the ledger as the first release wrote it
        conn.executescript(f"BEGIN; {sql}; INSERT INTO _migrations VALUES ('{name}', 0); COMMIT;")
    columns = [c for c in COLUMNS if c != "usage_estimated"]
    values = [getattr(row(1), c) for c in columns]
    conn.execute(f"INSERT INTO calls ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})", values)
    conn.commit()
    conn.close()
    ledger = Ledger(tmp_path / "old.sqlite")
    [old] = ledger.rows()
    assert old.usage_estimated is False and old.prompt_tokens == row(1).prompt_tokens
    assert ledger.totals(old.run, old.instance).usage_estimated == 0
    ledger.close()


def test_an_unwritable_ledger_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="--db"):
        Ledger(tmp_path / "missing-dir" / "l.sqlite")


# -- config -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.0.1", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.0.0.2", False),
        ("example.com", False),
    ],
)
def test_only_loopback_hosts_bind_without_a_token(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    config = ShimConfig(upstream="http://x/v1", db=":memory:", host=host)
    if loopback:
        config.check_bind()
    else:
        with pytest.raises(UserError):
            config.check_bind()
    ShimConfig(upstream="http://x/v1", db=":memory:", host=host, allow_remote=True, token="t").check_bind()


# -- transport ----------------------------------------------------------------------------------------------


def test_the_dechunker_decodes_however_the_bytes_are_split() -> None:
    pieces = [b"data: {}\n\n", b"x" * 300, b"tail"]
    wire = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\nTrailer: yes\r\n\r\n"
    rng = random.Random(7)
    for _ in range(200):
        dechunker, out, at = Dechunker(), b"", 0
        while at < len(wire):
            step = rng.randint(1, 17)
            out += dechunker.feed(wire[at : at + step])
            at += step
        assert dechunker.done and out == b"".join(pieces)
    with pytest.raises(ValueError):
        Dechunker().feed(b"zz\r\n")


@pytest.mark.timeout(20)
def test_the_lean_transport_reuses_connections_and_survives_an_upstream_restart() -> None:
    script = [{"content": "ok", "repeat": 6}]

    async def calls(client: httpx.AsyncClient, url: str, n: int) -> list[int]:
        return [(await client.post(url, json={"messages": []})).status_code for _ in range(n)]

    async def scenario() -> None:
        transport = LeanTransport()
        async with httpx.AsyncClient(transport=transport) as client:
            with ScriptedServer(script) as server:
                port, url = server.port, f"{server.base_url}/chat/completions"
                assert await calls(client, url, 3) == [200] * 3
                assert sum(len(idle) for idle in transport._idle.values()) == 1  # one connection, reused
            with ScriptedServer(script, port=port):
                await asyncio.sleep(0.05)
                assert await calls(client, url, 2) == [200] * 2
            with pytest.raises(httpx.ConnectError):
                await client.post(url, json={})

    asyncio.run(scenario())


def test_a_relay_response_abandoned_before_its_body_still_ends_the_call() -> None:
    ended: list[str] = []

    async def relay() -> AsyncGenerator[bytes, None]:
        try:
            yield b"data: {}\n\n"
        finally:
            ended.append("relay")

    async def abandon() -> None:
        ended.append("abandon")

    async def send(message: Message) -> None:
        raise OSError("the client is gone")

    async def receive() -> Message:
        return {"type": "http.disconnect"}

    scope = {"type": "http", "asgi": {"spec_version": "2.4"}}
    with pytest.raises(ClientDisconnect):
        asyncio.run(RelayResponse(relay(), {}, abandon)(scope, receive, send))
    assert ended == ["abandon"]  # the relay never started, so only `abandon` can meter and close the call


# -- wire ---------------------------------------------------------------------------------------------------


def test_sse_events_split_on_blank_lines_of_either_newline_style() -> None:
    events, rest = split_events(b"data: 1\n\ndata: 2\r\n\r\ndata: 3")
    assert (events, rest) == ([b"data: 1\n\n", b"data: 2\r\n\r\n"], b"data: 3")


@pytest.mark.parametrize(
    ("event", "kind", "prompt_tokens"),
    [
        (b"data: [DONE]\n\n", "done", None),
        (b'data: {"choices": [{"delta": {}}], "usage": null}\n\n', "plain", None),
        (b'data: {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 1}}\n\n', "usage", 7),
        (b'data: {"choices": [{"delta": {}}], "usage": {"prompt_tokens": 9}}\n\n', "plain", 9),  # llama.cpp style
        (b'data: {"choices": [], "usage": "broken"}\n\n', "plain", None),
        (b": keep-alive comment\n\n", "plain", None),
    ],
)
def test_events_are_classified_and_their_usage_read(event: bytes, kind: str, prompt_tokens: int | None) -> None:
    found, usage = inspect_event(event)
    assert (found, usage.prompt_tokens if usage else None) == (kind, prompt_tokens)


def test_usage_reads_openai_details_and_deepseek_cache_fields() -> None:
    openai_usage = {"prompt_tokens": 10, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 4}}
    openai_usage |= {"completion_tokens_details": {"reasoning_tokens": 3}}
    assert parse_usage(openai_usage) == Usage(10, 5, 4, 3)
    assert parse_usage({"prompt_tokens": 10, "prompt_cache_hit_tokens": 6}) == Usage(10, 0, 6, 0)
    assert parse_usage({"prompt_tokens": 10, "prompt_tokens_details": None}) == Usage(10)
    assert parse_usage(None) is None
