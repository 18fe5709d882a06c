"""Record and replay model calls, so a with-vs-without comparison pays the model only where the two runs differ.

A loopback proxy in front of the model server. Within one scope (one variant on one task) the n-th request with a
given body gets the n-th response recorded for that body, if there is one; otherwise it goes upstream and the answer
is recorded. Two variants that send the same prompts therefore see the same answers — for temperature > 0 samples
too, which is the common-random-numbers design: the variants differ only where the mechanism under test makes them
differ, not by the luck of the draw. A replayed call still counts its recorded usage and its recorded latency
(`model_s`), so token and time figures stay comparable; only the bench's own wall clock gets shorter.

Streaming requests and non-200 answers pass through unrecorded.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

UPSTREAM_TIMEOUT_S = 900


@dataclass(frozen=True)
class Recorded:
    """One upstream answer: its body and how long it took."""

    body: bytes
    latency_s: float


@dataclass
class ScopeStats:
    """What one scope cost: calls answered upstream, calls replayed, and the recorded seconds of both."""

    fresh: int = 0
    replayed: int = 0
    model_s: float = 0.0
    replayed_s: float = 0.0

    def as_row(self) -> dict[str, Any]:
        return {
            "fresh_calls": self.fresh,
            "replayed_calls": self.replayed,
            "model_s": round(self.model_s, 1),
            "replayed_s": round(self.replayed_s, 1),
        }


class ReplayStore:
    """Recorded answers by (request key, occurrence), appended to a JSONL file as they arrive."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.answers: dict[tuple[str, int], Recorded] = {}
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line
                self.answers[(row["key"], row["n"])] = Recorded(row["body"].encode(), float(row["latency_s"]))

    def get(self, key: str, n: int) -> Recorded | None:
        with self.lock:
            return self.answers.get((key, n))

    def put(self, key: str, n: int, recorded: Recorded) -> None:
        row = {"key": key, "n": n, "latency_s": round(recorded.latency_s, 3), "body": recorded.body.decode()}
        with self.lock:
            self.answers[(key, n)] = recorded
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(row) + "\n")


def request_key(path: str, body: bytes) -> str | None:
    """The identity of a request: its path and its JSON body with keys sorted; None for streams and non-JSON."""
    try:
        payload = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(payload, dict) or payload.get("stream"):
        return None
    canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(f"{path}\n{canonical}".encode()).hexdigest()


class ReplayProxy:
    """The proxy: `with proxy.scope() as stats:` around one run; `proxy.base_url` is what the harness calls."""

    def __init__(self, upstream: str, store: ReplayStore) -> None:
        self.upstream = upstream.rstrip("/")
        self.store = store
        self.lock = threading.Lock()
        self.seen: Counter[str] = Counter()
        self.stats = ScopeStats()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        parts = urlsplit(self.upstream)
        self.origin, self.prefix = f"{parts.scheme}://{parts.netloc}", parts.path

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}{self.prefix}"

    def __enter__(self) -> ReplayProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    @contextmanager
    def scope(self) -> Iterator[ScopeStats]:
        """One run: occurrence counters start again, and the run's stats are collected."""
        with self.lock:
            self.seen, self.stats = Counter(), ScopeStats()
        yield self.stats

    def answer(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        key = request_key(path, body)
        if key is None:
            status, data, _ = self.forward(path, body, headers)
            return status, data
        with self.lock:
            n = self.seen[key]
            self.seen[key] += 1
        recorded = self.store.get(key, n)
        if recorded is not None:
            with self.lock:
                self.stats.replayed += 1
                self.stats.replayed_s += recorded.latency_s
                self.stats.model_s += recorded.latency_s
            return 200, recorded.body
        status, data, latency = self.forward(path, body, headers)
        with self.lock:
            self.stats.fresh += 1
            self.stats.model_s += latency
        if status == 200:
            self.store.put(key, n, Recorded(data, latency))
        return status, data

    def forward(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, float]:
        request = urllib.request.Request(self.origin + path, data=body, method="POST", headers=headers)
        started = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=UPSTREAM_TIMEOUT_S) as response:
                return response.status, response.read(), time.monotonic() - started
        except urllib.error.HTTPError as error:
            return error.code, error.read(), time.monotonic() - started

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}
                try:
                    status, data = proxy.answer(self.path, body, headers)
                except OSError as exc:
                    status, data = 502, json.dumps({"error": {"message": f"replay proxy: {exc}"}}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
                return

        return Handler
