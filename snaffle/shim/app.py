"""The shim's Starlette app: forwards chat completions upstream, meters each call into the ledger, paces
admission and refuses calls that could pass a limit. Instance identity comes from the `/i/{run}/{instance}` prefix."""

from __future__ import annotations

import asyncio
import builtins
import hmac
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from snaffle.shim import limits
from snaffle.shim.config import ShimConfig
from snaffle.shim.ledger import Ledger, LedgerRow, Totals
from snaffle.shim.limits import Hold
from snaffle.shim.pacer import (
    Pacer,
    PacerTimeout,
    Ticket,
    asked_completion_tokens,
    estimate_prompt_tokens,
    estimate_text_tokens,
)
from snaffle.shim.pricing import Pricing, load_pricing
from snaffle.shim.transport import LeanTransport
from snaffle.shim.wire import (
    DONE_EVENT,
    chat_completion,
    error_body,
    inspect_event,
    parse_usage,
    passed_headers,
    split_events,
    streamed_text,
    usage_headers,
)
from snaffle.types import Usage

log = logging.getLogger("snaffle.shim")

DEFAULT_RUN = "default"
DEFAULT_INSTANCE = "default"
LONG_PROMPT_BYTES = 32_768
RELAYED_BYTES = 4 << 20
"""A stream's events kept for estimating its usage if it breaks (beyond this, the estimate undercounts)."""
INVALID_RESPONSE = "upstream_invalid_response"
"""The error type of a non-streamed 2xx answer that is not a chat completion (answered 502; usage unknown)."""

Key = tuple[str, str]


class StreamBroken(Exception):
    """The upstream stream failed mid-way; the client's connection is dropped the same way."""


@dataclass
class Call:
    """The working state of one call; it becomes a ledger row when the call ends."""

    run: str
    instance: str
    number: int
    model: str
    stream: bool
    ts: float
    t0: float
    status: int = 0
    ttfb: float | None = None
    usage: Usage | None = None
    bytes: int = 0
    error_type: str | None = None
    ticket: Ticket | None = None
    hold: Hold | None = None
    """What the call holds against the limits while in flight: a turn, its worst-case tokens and dollars."""
    finished: bool = False
    payload: dict[str, Any] | None = None
    """The request, kept for estimating the call's usage if the upstream never reports it."""
    relayed: list[builtins.bytes] = field(default_factory=list)
    """A stream's relayed events (up to RELAYED_BYTES), for the same estimate."""
    estimated: bool = False
    """`usage` is the shim's estimate: the upstream never reported it."""

    @property
    def key(self) -> Key:
        return (self.run, self.instance)

    @property
    def charged(self) -> bool:
        """The upstream answered with success, so it may have charged for the call (even if the answer was unusable)."""
        return 200 <= self.status < 300 or self.error_type == INVALID_RESPONSE


class Shim:
    """The proxy's state: one upstream client, the ledger, the pacer and the per-instance tallies."""

    def __init__(self, config: ShimConfig, pricing: Pricing | None = None) -> None:
        config.check_bind()
        self.config = config
        self.pricing = pricing if pricing is not None else load_pricing(config.pricing)
        key = config.api_key()
        headers = {"content-type": "application/json"} | ({"authorization": f"Bearer {key}"} if key else {})
        self._upstream_headers = httpx.Headers(headers)  # parsed once: they go with every call
        self._url = config.upstream.rstrip("/")
        self._chat_url = httpx.URL(f"{self._url}/chat/completions")
        self.ledger = Ledger(config.db)
        self.pacer = Pacer(config.max_in_flight, config.tokens_per_minute)
        self._client: httpx.AsyncClient | None = None
        self._totals: dict[Key, Totals] = {}
        self._numbers: dict[Key, int] = {}
        self._started: dict[Key, float] = {}
        self._held: dict[Key, Hold] = {}
        self._run_dollars: dict[str, float] = {}
        self._run_held: dict[str, Hold] = {}

    def app(self) -> ASGIApp:
        chat, models = self.chat, self.models
        app: ASGIApp = Starlette(
            routes=[
                Route("/i/{run}/{instance}/v1/chat/completions", chat, methods=["POST"]),
                Route("/i/{run}/{instance}/v1/models", models, methods=["GET"]),
                Route("/v1/chat/completions", chat, methods=["POST"]),
                Route("/v1/models", models, methods=["GET"]),
                Route("/ledger/{run}/{instance}", self.ledger_totals, methods=["GET"]),
                Route("/healthz", self.health, methods=["GET"]),
            ],
            lifespan=self.lifespan,
        )
        return TokenGate(app, self.config.token) if self.config.token else app

    @asynccontextmanager
    async def lifespan(self, app: object) -> AsyncIterator[None]:
        timeout = httpx.Timeout(self.config.upstream_timeout_s, connect=min(10.0, self.config.upstream_timeout_s))
        pool = httpx.Limits(max_connections=None, max_keepalive_connections=512, keepalive_expiry=30.0)
        lean = LeanTransport() if self._url.startswith("http://") else None
        self._client = httpx.AsyncClient(timeout=timeout, limits=pool, transport=lean)
        try:
            yield
        finally:
            await self._client.aclose()
            self.ledger.close()

    @property
    def client(self) -> httpx.AsyncClient:
        assert self._client is not None, "the shim's app is not started (its lifespan has not run)"
        return self._client

    # -- routes -------------------------------------------------------------------------------------------

    async def chat(self, request: Request) -> Response:
        run = request.path_params.get("run", DEFAULT_RUN)
        instance = request.path_params.get("instance", DEFAULT_INSTANCE)
        body = await read_body(request, self.config.max_body_bytes)
        if body is None:
            message = f"the request body is longer than {self.config.max_body_bytes} bytes: send a shorter one, or "
            headers = {**self._current(run, instance), "connection": "close"}  # the rest of the body is never read
            return error_response(413, "request_too_large", message + "raise the shim's --max-body-bytes", headers)
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):
            payload = None
        if not isinstance(payload, dict):
            message = "the body must be a chat-completions JSON object"
            return error_response(400, "invalid_request_error", message, self._current(run, instance))
        call = self._open(run, instance, payload)
        try:
            worst, estimate = await self._worst_case(call, payload, len(body))
            refusal = self._check(call, worst)  # checked and held with no await between: concurrent calls queue
            if refusal is not None:
                return self._refuse(call, refusal)
            call.ticket = await self._admit(call, worst, estimate)
        except PacerTimeout as exc:
            return self._refuse(call, limits.Refusal("timeout", f"the pacer did not admit it in time: {exc}"))
        finally:
            if call.ticket is None:
                self._finish(call)  # refused above or cancelled while waiting: row written, slot and hold freed
        if call.stream:
            return await self._stream(call, payload, body)
        return await self._complete(call, body)

    async def models(self, request: Request) -> Response:
        current = self._current(
            request.path_params.get("run", DEFAULT_RUN), request.path_params.get("instance", DEFAULT_INSTANCE)
        )
        try:
            upstream = await self.client.get(f"{self._url}/models", headers=self._upstream_headers)
        except httpx.HTTPError as exc:
            return error_response(502, "upstream_unavailable", f"upstream {type(exc).__name__}", current)
        return Response(upstream.content, upstream.status_code, headers={**passed_headers(upstream.headers), **current})

    async def ledger_totals(self, request: Request) -> Response:
        run, instance = request.path_params["run"], request.path_params["instance"]
        totals = self.ledger.totals(run, instance)
        body = {
            "run": run,
            "instance": instance,
            **totals.as_dict(),
            "run_dollars": self.ledger.run_dollars(run),
        }
        return JSONResponse(body, headers=usage_headers(totals))

    async def health(self, request: Request) -> Response:
        pacer = self.pacer
        return JSONResponse(
            {"ok": True, "in_flight": pacer.in_flight, "peak_in_flight": pacer.peak_in_flight, "waiting": pacer.waiting}
        )

    # -- one call ------------------------------------------------------------------------------------------

    def _open(self, run: str, instance: str, payload: dict[str, Any]) -> Call:
        key = (run, instance)
        if key not in self._totals:
            self._load(key)
        self._numbers[key] += 1
        now = time.time()
        self._started.setdefault(key, now)
        model, stream = str(payload.get("model") or ""), payload.get("stream") is True
        return Call(run, instance, self._numbers[key], model, stream, now, time.perf_counter(), payload=payload)

    def _current(self, run: str, instance: str) -> dict[str, str]:
        """The instance's cumulative usage headers, for answers that are not calls."""
        if (run, instance) not in self._totals:
            self._load((run, instance))
        return usage_headers(self._totals[run, instance])

    def _load(self, key: Key) -> None:
        """Continue an instance's tallies from the ledger (after a restart, say)."""
        totals = self._totals[key] = self.ledger.totals(*key)
        self._numbers[key] = totals.requests
        self._held[key] = Hold()
        if totals.first_ts is not None:
            self._started[key] = totals.first_ts
        if key[0] not in self._run_dollars:
            self._run_dollars[key[0]] = self.ledger.run_dollars(key[0])
            self._run_held[key[0]] = Hold()

    async def _worst_case(self, call: Call, payload: Mapping[str, Any], size: int) -> tuple[Hold, int]:
        """What the call may spend at most (a turn; its prompt estimate plus its `max_tokens`, else the configured
        reserve; their price), and the pacer's estimate (the prompt plus the `max_tokens` asked for, if any)."""
        config = self.config
        capped = bool(config.limits.max_tokens or config.limits.max_dollars or config.run_max_dollars)
        if not (capped or self.pacer.tokens_per_minute):
            return Hold(turns=1), 0
        if size > LONG_PROMPT_BYTES:  # a long prompt is encoded off the event loop
            prompt = await asyncio.to_thread(estimate_prompt_tokens, payload)
        else:
            prompt = estimate_prompt_tokens(payload)
        asked = asked_completion_tokens(payload)
        worst = Usage(prompt, config.reserve_output_tokens if asked is None else asked)
        dollars = (self.pricing.dollars(call.model, worst) or 0.0) if capped else 0.0  # unknown: no dollar hold
        return Hold(1, worst.total_tokens, dollars), prompt + (asked or 0)

    def _check(self, call: Call, worst: Hold) -> limits.Refusal | None:
        return limits.check(
            self.config.limits,
            self._totals[call.key],
            held=self._held[call.key],
            worst=worst,
            run_dollars=self._run_dollars[call.run] + self._run_held[call.run].dollars,
            run_max_dollars=self.config.run_max_dollars,
            started=self._started[call.key],
            now=call.ts,
        )

    async def _admit(self, call: Call, worst: Hold, estimate: int) -> Ticket:
        """Hold the call's worst case against the limits, then wait for the pacer, at most for the instance's
        remaining wall-clock; `_finish` gives the hold back and counts the real usage instead."""
        call.hold = worst
        self._held[call.key] += worst
        self._run_held[call.run] += worst
        left = limits.remaining(self.config.limits, self._started[call.key], time.time())
        return await self.pacer.acquire(estimate, timeout=left)

    def _refuse(self, call: Call, refusal: limits.Refusal) -> Response:
        call.status, call.error_type = 429, refusal.type
        totals = self._finish(call)
        message = f"snaffle shim refused call {call.number} of {call.run}/{call.instance}: {refusal.message}"
        headers = {
            "x-should-retry": "false",
            "x-snaffle-refused": refusal.type,
            **usage_headers(totals, call.number),
        }
        return error_response(429, refusal.type, message, headers)

    async def _complete(self, call: Call, body: bytes) -> Response:
        try:
            status, content, headers = await self._forward(call, body)
        finally:
            totals = self._finish(call)
        return Response(content, status, headers={**headers, **usage_headers(totals, call.number)})

    async def _forward(self, call: Call, body: bytes) -> tuple[int, bytes, dict[str, str]]:
        try:
            async with self.client.stream(
                "POST", self._chat_url, content=body, headers=self._upstream_headers
            ) as upstream:
                call.ttfb, call.status = time.perf_counter() - call.t0, upstream.status_code
                content = await upstream.aread()
        except httpx.HTTPError as exc:
            return self._upstream_failed(call, exc)
        call.bytes = len(content)
        if not upstream.is_success:
            call.error_type = f"upstream_{upstream.status_code}"
            return upstream.status_code, content, passed_headers(upstream.headers)
        answer = chat_completion(content)
        if answer is None:
            return await self._invalid_answer(call, upstream.status_code)
        usage = parse_usage(answer.get("usage"))
        call.usage = None if usage is None else self._priced(call, usage)
        return upstream.status_code, content, passed_headers(upstream.headers)

    async def _invalid_answer(self, call: Call, status: int) -> tuple[int, bytes, dict[str, str]]:
        """A 2xx answer that is not a chat completion: a 502 to the client, and a row whose usage is unknown (the
        upstream read the prompt, so the prompt estimate is counted)."""
        call.status, call.error_type = 502, INVALID_RESPONSE
        await self._estimate_missing_usage(call)
        message = (
            f"the upstream answered {status} with something that is not a chat completion (not JSON, or no "
            "`choices`): check that --upstream is an OpenAI-compatible base URL"
        )
        return 502, json.dumps(error_body(INVALID_RESPONSE, message)).encode(), {"content-type": "application/json"}

    async def _stream(self, call: Call, payload: dict[str, Any], body: bytes) -> Response:
        options = payload.get("stream_options")
        asked = isinstance(options, dict) and bool(options.get("include_usage"))
        if not asked and b'"stream_options"' in body:
            payload["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
            body = json.dumps(payload).encode()
        elif not asked:  # add the key in front rather than re-encode a long prompt (`stream` is a key after it)
            start = body.index(b"{") + 1
            body = body[:start] + b'"stream_options": {"include_usage": true}, ' + body[start:]
        request = self.client.build_request("POST", self._chat_url, content=body, headers=self._upstream_headers)
        try:
            upstream = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            status, content, headers = self._upstream_failed(call, exc)
            return Response(content, status, headers={**headers, **usage_headers(self._finish(call), call.number)})
        call.status = upstream.status_code
        if not upstream.is_success:
            call.error_type = f"upstream_{upstream.status_code}"
            try:
                content = await upstream.aread()
            except httpx.HTTPError:
                content = b""
            finally:
                await upstream.aclose()
                totals = self._finish(call)
            headers = passed_headers(upstream.headers)
            return Response(content, upstream.status_code, headers={**headers, **usage_headers(totals, call.number)})
        headers = {**passed_headers(upstream.headers), **usage_headers(self._totals[call.key], call.number)}
        headers["x-snaffle-as-of"] = "before-call"  # headers go out before this call's usage is known
        relay = self._relay(call, upstream, strip_usage=not asked)
        return RelayResponse(relay, headers, partial(self._abandon, call, upstream))

    async def _relay(self, call: Call, upstream: httpx.Response, strip_usage: bool) -> AsyncGenerator[bytes, None]:
        """Pass the upstream's SSE events through as they arrive; take the usage chunk (and hide it when the
        client did not ask for it); hold `[DONE]` back until the call's ledger row is committed."""
        done = completed = False
        buffer = b""
        try:
            async for chunk in upstream.aiter_bytes():
                if call.ttfb is None:
                    call.ttfb = time.perf_counter() - call.t0
                call.bytes += len(chunk)
                events, buffer = split_events(buffer + chunk)
                kept = []
                for event in events:
                    kind, usage = inspect_event(event)
                    done = done or kind == "done"
                    if usage is not None:
                        call.usage = self._priced(call, usage)
                    if kind == "plain" or (kind == "usage" and not strip_usage):
                        kept.append(event)
                if call.bytes <= RELAYED_BYTES:
                    call.relayed += kept
                if kept:
                    yield b"".join(kept)
            if buffer.strip():
                yield buffer
            completed = True
            if not done and call.usage is None:
                call.error_type = "stream_incomplete"
        except httpx.HTTPError as exc:
            call.error_type = "upstream_timeout" if isinstance(exc, httpx.TimeoutException) else "stream_broken"
            raise StreamBroken(f"{type(exc).__name__} after {call.bytes} bytes") from exc
        finally:
            if not completed and call.error_type is None:
                call.error_type = "client_disconnected"
            with anyio.CancelScope(shield=True):
                await upstream.aclose()
                await self._estimate_missing_usage(call)
                self._finish(call)
        if done:
            yield DONE_EVENT

    async def _abandon(self, call: Call, upstream: httpx.Response) -> None:
        """End a streamed call whose relay never ran (the client left before the body started)."""
        if not call.finished:
            call.error_type = call.error_type or "client_disconnected"
            await upstream.aclose()
            await self._estimate_missing_usage(call)
            self._finish(call)

    def _upstream_failed(self, call: Call, exc: httpx.HTTPError) -> tuple[int, bytes, dict[str, str]]:
        timed_out = isinstance(exc, httpx.TimeoutException)
        call.status = 504 if timed_out else 502
        unreachable = isinstance(exc, httpx.ConnectError)
        call.error_type = (
            "upstream_timeout" if timed_out else ("upstream_unavailable" if unreachable else "upstream_broken")
        )
        message = f"upstream {type(exc).__name__} ({call.error_type.removeprefix('upstream_').replace('_', ' ')})"
        body = error_body(call.error_type, message)
        return call.status, json.dumps(body).encode(), {"content-type": "application/json"}

    def _priced(self, call: Call, usage: Usage) -> Usage:
        return usage.with_dollars(self.pricing.dollars(call.model, usage))

    async def _estimate_missing_usage(self, call: Call) -> None:
        """An answered call without its usage (a stream that ended before it, an answer that is not a chat
        completion): count what it cost, as an estimate (encoded off the event loop, where a long prompt would
        stall every other client)."""
        if call.usage is None and call.payload is not None and call.charged:
            call.usage = self._priced(call, await asyncio.to_thread(_estimate, call.payload, call.relayed))
            call.estimated = True

    def _finish(self, call: Call) -> Totals:
        """End a call once: free its pacer slot and turn, append its ledger row, update the tallies."""
        if call.finished:
            return self._totals[call.key]
        call.finished = True
        if not call.status:  # it never got an answer: cancelled while waiting for admission
            call.status, call.error_type = 499, call.error_type or "cancelled"
        if call.hold is not None:
            self._held[call.key] -= call.hold
            self._run_held[call.run] -= call.hold
        unknown = (call.usage is None or call.estimated) and call.charged
        usage = call.usage or Usage()
        if call.ticket is not None:
            self.pacer.release(call.ticket, None if unknown else usage.total_tokens)
        row = ledger_row(call, usage, unknown)
        totals = self._totals[call.key] = self._totals[call.key].add(row)
        self._run_dollars[call.run] += usage.dollars
        if unknown:
            _warn_unknown(call)
        self.ledger.append(row)
        return totals


def _estimate(payload: Mapping[str, Any], relayed: list[bytes]) -> Usage:
    return Usage(estimate_prompt_tokens(payload), estimate_text_tokens(streamed_text(relayed)))


class RelayResponse(StreamingResponse):
    """A streaming response that always closes its relay, so the relay's `finally` meters the call even when
    the client goes away mid-stream; when the upstream broke, the client's connection is dropped too."""

    def __init__(
        self, relay: AsyncGenerator[bytes, None], headers: Mapping[str, str], abandon: Callable[[], Awaitable[None]]
    ) -> None:
        super().__init__(relay, headers=headers)
        self.relay = relay
        self.abandon = abandon

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        async for chunk in self.relay:
            last = chunk is DONE_EVENT  # `[DONE]` comes last: send it with the end of the body, in one write
            await send({"type": "http.response.body", "body": chunk, "more_body": not last})
            if last:
                return
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except StreamBroken:
            pass  # returning without the final body message makes the server close the connection
        finally:
            with anyio.CancelScope(shield=True):
                await self.relay.aclose()  # runs the relay's `finally`, if it ever started
                await self.abandon()


class TokenGate:
    """Refuses requests without `Authorization: Bearer <token>` or `x-snaffle-token: <token>`."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            given = headers.get(b"x-snaffle-token") or headers.get(b"authorization", b"").removeprefix(b"Bearer ")
            if not hmac.compare_digest(given.strip(), self.token):
                response = error_response(401, "unauthorized", "this shim needs its token as the API key")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def error_response(status: int, kind: str, message: str, headers: Mapping[str, str] | None = None) -> Response:
    return JSONResponse(error_body(kind, message), status_code=status, headers=headers)


async def read_body(request: Request, limit: int) -> bytes | None:
    """The request's body, or None when it is longer than `limit` bytes (0: no limit); an oversize body is read
    no further than the limit, and not at all when its declared length is over it."""
    declared = request.headers.get("content-length", "")
    if limit and declared.isdigit() and int(declared) > limit:
        return None
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if limit and size > limit:
            return None
        parts.append(part)
    return b"".join(parts)


def build_app(config: ShimConfig, pricing: Pricing | None = None) -> ASGIApp:
    """The shim as an ASGI app (opens the ledger now; the upstream client starts with the app's lifespan)."""
    return Shim(config, pricing).app()


def ledger_row(call: Call, usage: Usage, unknown: bool) -> LedgerRow:
    """The call's one ledger row, as it ended."""
    ttfb_ms = None if call.ttfb is None else round(call.ttfb * 1000, 3)
    elapsed_ms = round((time.perf_counter() - call.t0) * 1000, 3)
    return LedgerRow(
        call.ts,
        call.run,
        call.instance,
        call.number,
        call.model,
        call.stream,
        call.status,
        elapsed_ms,
        ttfb_ms,
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.cached_tokens,
        usage.reasoning_tokens,
        usage.known_dollars,
        unknown,
        call.bytes,
        call.error_type,
        call.estimated,
    )


def _warn_unknown(call: Call) -> None:
    estimated = " (estimated)" if call.estimated else ""
    log.warning(
        "call %d of %s/%s: %s after %d bytes, before its usage: usage unknown" + estimated,
        call.number,
        call.run,
        call.instance,
        call.error_type or "no usage",
        call.bytes,
    )
