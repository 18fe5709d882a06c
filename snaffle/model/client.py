"""Model boundary: one chat-completions call through the OpenAI SDK, retried with tenacity, decoded into a reply.

Tool calls are decoded from native `tool_calls` or from the text protocol (`<tool_call>{json}</tool_call>` blocks in
the reply, the format Qwen-family models emit); both are accepted whatever the configured protocol.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception, wait_random_exponential

from snaffle.exceptions import EndpointError, LimitsExceeded, ModelError, UserError
from snaffle.model.text_protocol import decode_text_calls, parse_arguments
from snaffle.types import Message, ModelReply, ToolCall, Usage

if TYPE_CHECKING:
    import openai

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 12.0
MAX_ATTEMPTS = 8
DEFAULT_CALL_TIMEOUT_S = 600.0
SHIM_LIMIT_TYPES = frozenset({"budget_exceeded", "max_turns_exceeded", "timeout"})
NOT_RETRIED_TYPES = frozenset({"upstream_invalid_response"})
"""The shim's 502 for a 2xx answer that is not a chat completion: the same endpoint answers the same way again."""
SAMPLE_CHARS = 80
SHIM_HEADER_PREFIX = "x-snaffle-"
PREFLIGHT_TRIES = 3
PREFLIGHT_TIMEOUT_S = 5.0

RetryHook = Callable[[int, str, float], None]
"""Called before each retry sleep with (attempt number, error text, seconds to wait)."""
Sleep = Callable[[float], None]
"""Waits out one retry's backoff: `time.sleep`, or a no-op where the schedule is checked but not slept through."""


MAX_STOP_SEQUENCES = 4
"""OpenAI's chat-completions API accepts up to four stop sequences."""


@dataclass(frozen=True)
class ModelConfig:
    """How to reach one OpenAI-compatible endpoint. The API key is held here only, never written anywhere."""

    base_url: str
    model: str
    api_key: str = "not-needed"
    temperature: float | None = None
    max_output_tokens: int | None = None
    tool_protocol: str = "native"
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    retry_sleep: Sleep = time.sleep
    stop: tuple[str, ...] = ()
    """Stop sequences sent as `stop` (the server cuts the reply before the first one; at most 4 on the wire)."""


class OpenAIModel:
    """The `Model` seam over the OpenAI SDK (its own retries off; ours are in `complete`)."""

    def __init__(
        self,
        config: ModelConfig,
        deadline: float | None = None,
        on_retry: RetryHook | None = None,
    ) -> None:
        self.config = config
        self.name = config.model
        self.deadline = deadline
        self.on_retry = on_retry
        import openai  # imported on first use: it costs about a second at start-up

        self._client = openai.OpenAI(base_url=config.base_url, api_key=config.api_key, max_retries=0)

    @property
    def protocol(self) -> str:
        """The configured tool-call protocol (`native` or `text`); replies in either are decoded."""
        return self.config.tool_protocol

    def complete(self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> ModelReply:
        retrying = Retrying(
            retry=retry_if_exception(is_retryable),
            wait=wait_random_exponential(multiplier=BACKOFF_MIN_S, min=BACKOFF_MIN_S, max=BACKOFF_MAX_S),
            stop=self._should_stop,
            before_sleep=self._before_sleep,
            sleep=self.config.retry_sleep,
            reraise=True,
        )
        import openai

        try:
            return retrying(self._call_once, messages, tools)
        except openai.APIError as exc:
            attempts = int(retrying.statistics.get("attempt_number", 1))
            if is_retryable(exc) and self.deadline is not None and attempts < MAX_ATTEMPTS:
                raise LimitsExceeded("timeout", f"wall-clock cap reached while retrying: {_describe(exc)}") from exc
            if isinstance(exc, openai.APIStatusError):
                raise _status_interrupt(exc) from exc
            raise ModelError(f"model endpoint failed after retries: {_describe(exc)}") from exc

    def _past_deadline(self, ahead_s: float = 0.0) -> bool:
        return self.deadline is not None and time.monotonic() + ahead_s >= self.deadline

    def _call_once(self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> ModelReply:
        timeout = self._timeout()
        started = time.monotonic()
        raw = self._client.chat.completions.with_raw_response.create(
            **request_body(self.config, messages, tools), timeout=timeout
        )
        completion = chat_completion(raw.content, raw.headers.get("content-type", ""))
        latency = time.monotonic() - started
        return decode_reply(completion, latency, shim_headers(dict(raw.headers)))

    def _timeout(self) -> float:
        timeout = self.config.call_timeout_s
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise LimitsExceeded("timeout", "wall-clock cap reached while waiting for the model")
            timeout = min(timeout, left)
        return max(timeout, 0.05)

    def _should_stop(self, state: RetryCallState) -> bool:
        return state.attempt_number >= MAX_ATTEMPTS or self._past_deadline(state.upcoming_sleep or 0.0)

    def _before_sleep(self, state: RetryCallState) -> None:
        if self.on_retry is None or state.outcome is None:
            return
        error = state.outcome.exception()
        self.on_retry(state.attempt_number, _describe(error), state.upcoming_sleep or 0.0)


def request_body(
    config: ModelConfig, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The chat-completions request; temperature and max tokens only when configured."""
    body: dict[str, Any] = {"model": config.model, "messages": list(messages)}
    if tools and config.tool_protocol == "native":
        body["tools"] = [{"type": "function", "function": dict(t)} for t in tools]
    if config.temperature is not None:
        body["temperature"] = config.temperature
    if config.max_output_tokens is not None:
        body["max_tokens"] = config.max_output_tokens
    if config.stop:
        body["stop"] = list(config.stop[:MAX_STOP_SEQUENCES])
    return body


def is_retryable(exc: BaseException) -> bool:
    """408, 429 (unless the shim refused on a limit), 5xx (unless the shim says the answer was garbage), timeouts and
    connection errors."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        kind = _error_type(exc)
        return exc.status_code in RETRYABLE_STATUS and kind not in SHIM_LIMIT_TYPES and kind not in NOT_RETRIED_TYPES
    return isinstance(exc, openai.APIConnectionError | openai.APITimeoutError)


def _status_interrupt(exc: openai.APIStatusError) -> LimitsExceeded | ModelError:
    kind = _error_type(exc)
    if kind in SHIM_LIMIT_TYPES:
        return LimitsExceeded(kind, f"the metering shim refused the call: {kind}")
    return ModelError(f"model endpoint answered HTTP {exc.status_code}: {_describe(exc)}")


def _error_type(exc: openai.APIStatusError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body)
    return str(error.get("type", "")) if isinstance(error, dict) else ""


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


def shim_headers(headers: Mapping[str, str]) -> dict[str, float]:
    """Cumulative usage the metering shim reports in `x-snaffle-*` headers."""
    found: dict[str, float] = {}
    for key, value in headers.items():
        if key.lower().startswith(SHIM_HEADER_PREFIX):
            try:
                found[key.lower()[len(SHIM_HEADER_PREFIX) :].replace("-", "_")] = float(value)
            except ValueError:
                continue
    return found


def chat_completion(data: bytes, content_type: str) -> dict[str, Any]:
    """The answer's JSON when it has the shape of a chat completion, else a `ModelError` showing what came instead
    (an HTML page from a wrong base URL, a JSON of another API); not retried, the same endpoint answers the same."""
    try:
        body = json.loads(data)
    except ValueError:
        body = None
    if not is_chat_completion(body):
        raise ModelError(
            f"the model endpoint answered with something that is not a chat completion ({sample(data, content_type)})"
        )
    return dict(body)


def is_chat_completion(body: object) -> bool:
    """An object whose first choice holds a message (text or null content, a list of tool calls or none) and whose
    usage, when present, is an object: what `decode_reply` reads."""
    if not isinstance(body, dict) or not isinstance(body.get("usage"), dict | None):
        return False
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return False
    message = choices[0].get("message")
    if not isinstance(message, dict) or not isinstance(message.get("content"), str | None):
        return False
    calls = message.get("tool_calls")
    return calls is None or (isinstance(calls, list) and all(isinstance(c, dict) for c in calls))


def sample(data: bytes, content_type: str) -> str:
    """What an answer is, in a few words: its content type, its size and its first characters on one line."""
    text = " ".join(data[:1000].decode("utf-8", "replace").split())
    shown = text[:SAMPLE_CHARS] + ("…" if len(text) > SAMPLE_CHARS else "")
    return f"{content_type.split(';')[0].strip() or 'no content type'}, {len(data)} bytes: {shown!r}"


def decode_reply(completion: Mapping[str, Any], latency_s: float, shim: Mapping[str, float]) -> ModelReply:
    """Turn a chat.completion object into a `ModelReply`, decoding tool calls natively or from text."""
    choices = completion.get("choices") or [{}]
    message = choices[0].get("message") or {}
    content = message.get("content") or ""
    native = message.get("tool_calls") or []
    calls = tuple(decode_native_call(c) for c in native) if native else decode_text_calls(content)
    return ModelReply(
        content=content,
        tool_calls=calls,
        reasoning=message.get("reasoning_content") or message.get("reasoning"),
        usage=decode_usage(completion.get("usage") or {}),
        latency_s=latency_s,
        finish_reason=choices[0].get("finish_reason"),
        protocol="native" if native else "text",
        shim=dict(shim),
    )


def decode_usage(usage: Mapping[str, Any]) -> Usage:
    """Usage from the wire; missing details count as zero."""
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    return Usage(
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        cached_tokens=int(prompt_details.get("cached_tokens") or 0),
        reasoning_tokens=int(completion_details.get("reasoning_tokens") or 0),
    )


def decode_native_call(call: Mapping[str, Any]) -> ToolCall:
    """One native tool call; undecodable arguments become a call with `error` set."""
    function = call.get("function")
    if not isinstance(function, dict):
        function = {}
    raw = function.get("arguments") or "{}"
    arguments, error = parse_arguments(raw if isinstance(raw, str) else json.dumps(raw))
    return ToolCall(str(call.get("id") or ""), str(function.get("name") or ""), arguments, error, str(raw))


def check_endpoint(base_url: str, timeout_s: float = PREFLIGHT_TIMEOUT_S) -> None:
    """Fail fast, in one line, when nothing accepts a connection at the endpoint (refused, a name that does not
    resolve, no handshake in time) or it answers 200 with something that is not an OpenAI model list. Any other
    HTTP answer (even 404) is fine, and so is a server that accepted the connection but is busy (a read timeout, as
    a single-slot server generating for another client gives): the real call has its own timeouts and retries."""
    url = check_url(base_url).rstrip("/") + "/models"
    error: httpx.HTTPError | None = None
    for attempt in range(PREFLIGHT_TRIES):
        if attempt:
            time.sleep(BACKOFF_MIN_S * attempt)
        try:
            response = httpx.get(url, timeout=timeout_s)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            error = exc
            continue
        except httpx.HTTPError:
            return  # it accepted the connection: reachable, whatever it does next
        return check_model_list(base_url, url, response)
    reason = " ".join(str(error).split())[:200] or type(error).__name__
    raise EndpointError(
        f"model endpoint unreachable at {base_url} ({type(error).__name__}: {reason}); check --base-url"
    )


def check_url(base_url: str) -> str:
    """The base URL when it is an http:// or https:// URL with a host (and a valid port), else a user error."""
    try:
        parts = urlsplit(base_url)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:
        valid = False
    if not valid:
        raise UserError(f"--base-url {base_url!r} is not an http:// or https:// URL (e.g. http://127.0.0.1:8080/v1)")
    return base_url


def check_model_list(base_url: str, url: str, response: httpx.Response) -> None:
    """A 200 answer must be an OpenAI model list (`{"data": [...]}`); a web page or another API is refused."""
    if response.status_code != 200:
        return
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("data"), list):
        return
    what = sample(response.content, response.headers.get("content-type", ""))
    raise EndpointError(
        f"model endpoint at {base_url} is not an OpenAI-compatible API: GET {url} answered 200 with {what}; "
        "check --base-url (it usually ends in /v1)"
    )
