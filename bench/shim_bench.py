"""Benchmark the shim against a stub upstream on loopback: added latency and throughput, streaming and not.

Run: .venv/bin/python bench/shim_bench.py [--seconds 5] [--litellm /tmp/litellm-venv/bin/litellm]

Three processes share the machine: a raw-asyncio stub upstream, the shim (`python -m snaffle.shim.cli serve`)
and this load generator (a raw-socket keep-alive HTTP/1.1 client, so the client is not the bottleneck).
Added latency is measured with one client alternating direct and shim requests in the same run, and reported
per quantile (shim p50 - direct p50, shim p99 - direct p99). Lost ledger rows = answers the client received in
full minus rows the ledger holds for that scenario's instance.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMPLETION = json.dumps(
    {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14},
    }
).encode()
CONTENT_LENGTH = re.compile(rb"content-length:\s*(\d+)")
CLIENT_KEY = b"sk-bench-9f2c41d7a3e85b06c1f4d2a7e9b3c580"  # LiteLLM refuses to start without a master key
WARMUP = 50
LITELLM_PAIRS = 300  # it is ~50x slower: fewer pairs keep the run short
DIRECT = "/v1/chat/completions"
PROMPT = [{"role": "user", "content": "Say ok. " * 20}]
STREAM_PIECES = 5

# -- the stub upstream ---------------------------------------------------------------------------------------


def _sse(include_usage: bool) -> bytes:
    base = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": "gpt-4o-mini"}
    events = [base | {"choices": [{"index": 0, "delta": {"content": "ok "}, "finish_reason": None}]}]
    events *= STREAM_PIECES
    events.append(base | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    if include_usage:
        events.append(base | {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 5}})
    body = b""
    for data in [json.dumps(e).encode() for e in events] + [b"[DONE]"]:
        chunk = b"data: " + data + b"\n\n"
        body += b"%x\r\n%s\r\n" % (len(chunk), chunk)
    return body + b"0\r\n\r\n"


class StubProtocol(asyncio.Protocol):
    """A fixed-answer OpenAI-compatible endpoint: enough HTTP/1.1 for keep-alive clients, nothing more."""

    plain = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        len(COMPLETION),
        COMPLETION,
    )
    stream_head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    streams = {True: stream_head + _sse(True), False: stream_head + _sse(False)}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].lower()
            found = CONTENT_LENGTH.search(head)
            length = int(found.group(1)) if found else 0
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            if b'"stream": true' in body or b'"stream":true' in body:
                self.transport.write(self.streams[b'"include_usage": true' in body or b'"include_usage":true' in body])
            else:
                self.transport.write(self.plain)


def serve_stub(port: int) -> None:
    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(StubProtocol, "127.0.0.1", port, backlog=1024)
        print("ready", flush=True)
        await server.serve_forever()

    asyncio.run(main())


# -- the load generator ---------------------------------------------------------------------------------------


class Client:
    """One keep-alive HTTP/1.1 connection that posts a fixed request and reads the whole answer."""

    def __init__(self, port: int, path: str, stream: bool) -> None:
        self.port = port
        body = json.dumps({"model": "gpt-4o-mini", "messages": PROMPT, "stream": stream}).encode()
        head = b"POST %s HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n" % path.encode()
        head += b"authorization: Bearer %s\r\ncontent-length: %d\r\n\r\n" % (CLIENT_KEY, len(body))
        self.request = head + body
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def call(self) -> float:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
            self.writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        assert self.reader is not None
        start = time.perf_counter()
        self.writer.write(self.request)
        head = (await self.reader.readuntil(b"\r\n\r\n")).lower()
        if not head.startswith(b"http/1.1 200"):
            raise RuntimeError(head.decode(errors="replace"))
        if b"transfer-encoding: chunked" in head:
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
                await self.reader.readexactly(size + 2)
                if size == 0:
                    break
        else:
            start_cl = head.index(b"content-length:") + 15
            await self.reader.readexactly(int(head[start_cl : head.index(b"\r\n", start_cl)]))
        return time.perf_counter() - start

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def load(port: int, path: str, stream: bool, clients: int, seconds: float) -> tuple[int, list[float]]:
    """`clients` connections posting back to back for `seconds`; returns completed calls and latencies."""
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    async def worker() -> None:
        client = Client(port, path, stream)
        try:
            while time.perf_counter() < stop:
                latencies.append(await client.call())
        finally:
            client.close()

    await asyncio.gather(*(worker() for _ in range(clients)))
    return len(latencies), latencies


async def paired_latency(direct: int, shim: int, path: str, stream: bool, n: int) -> tuple[list[float], list[float]]:
    """One client alternating direct and shim requests, so both paths see the same machine state."""
    a, b = Client(direct, "/v1/chat/completions", stream), Client(shim, path, stream)
    for _ in range(WARMUP):  # warm up connections and code paths
        await a.call(), await b.call()
    direct_s, shim_s = [], []
    for _ in range(n):
        direct_s.append(await a.call())
        shim_s.append(await b.call())
    a.close()
    b.close()
    return direct_s, shim_s


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000)[int(q * 1000) - 1] if len(values) > 1 else values[0]


# -- processes ------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(port: int, path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode())
                if sock.recv(64).startswith(b"HTTP/1.1"):
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing answered on port {port} within {timeout} s")


@contextmanager
def process(
    cmd: list[str], port: int, path: str, log: Path, timeout: float = 20.0, **kw: object
) -> Iterator[subprocess.Popen[bytes]]:
    """Run `cmd` until the block ends, once it answers on `port`; its output goes to `log` (never to a pipe
    nobody reads: a full pipe blocks the process)."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, **kw)  # type: ignore[call-overload]
    try:
        wait_http(port, path, timeout)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def litellm_proxy(litellm: str, upstream_port: int, port: int, workdir: Path) -> list[str]:
    config = workdir / "litellm.yaml"
    config.write_text(
        "model_list:\n  - model_name: gpt-4o-mini\n    litellm_params:\n      model: openai/gpt-4o-mini\n"
        f"      api_base: http://127.0.0.1:{upstream_port}/v1\n      api_key: unused\n"
        "litellm_settings:\n  drop_params: true\n"
        f"general_settings:\n  master_key: {CLIENT_KEY.decode()}\n"
    )
    return [
        litellm,
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        "1",
    ]


# -- the benchmark --------------------------------------------------------------------------------------------


MODES = (("plain", False), ("stream", True))
CLIENTS = (1, 8, 64)
TARGETS = "targets: added p50 <= 1.5 ms, p99 <= 5 ms; >= 800 req/s plain at 64 clients; 0 lost ledger rows"


def added_latency(direct: int, proxy: int, path: str, stream: bool, pairs: int) -> tuple[float, float]:
    """(p50, p99) of the proxy path minus the direct path, in ms, from interleaved requests."""
    direct_s, proxy_s = asyncio.run(paired_latency(direct, proxy, path, stream, pairs))
    return tuple((quantile(proxy_s, q) - quantile(direct_s, q)) * 1000 for q in (0.5, 0.99))  # type: ignore[return-value]


def throughput(port: int, path: str, stream: bool, clients: int, seconds: float) -> tuple[int, str]:
    """Completed calls and 'p50 / p99' latency in ms."""
    n, latencies = asyncio.run(load(port, path, stream, clients, seconds))
    return n, f"{quantile(latencies, 0.5) * 1000:.1f} / {quantile(latencies, 0.99) * 1000:.1f}"


def run(seconds: float, pairs: int, litellm: str | None) -> int:
    python = sys.executable
    stub_port, shim_port = free_port(), free_port()
    workdir = Path(tempfile.mkdtemp(prefix="shim-bench-"))
    db = workdir / "ledger.sqlite"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_KEY": "sk-bench"}
    shim_cmd = [python, "-m", "snaffle.shim.cli", "serve", "--upstream", f"http://127.0.0.1:{stub_port}/v1"]
    shim_cmd += ["--api-key-env", "BENCH_KEY", "--db", str(db), "--port", str(shim_port), "--max-in-flight", "128"]
    latency: dict[tuple[str, str], tuple[float, float]] = {}
    cells: dict[tuple[str, str, int], tuple[int, str]] = {}
    completed: dict[str, int] = {}
    print(f"{os.cpu_count()} cores, python {sys.version.split()[0]}; {seconds:g} s per throughput cell; {pairs} pairs")
    print("stub upstream, shim (python -m snaffle.shim.cli serve --max-in-flight 128) and client: one process each")
    with process([python, __file__, "--stub", str(stub_port)], stub_port, "/v1/models", workdir / "stub.log"):
        with process(shim_cmd, shim_port, "/healthz", workdir / "shim.log", env=env, cwd=ROOT):
            for kind, stream in MODES:
                path = f"/i/bench/latency-{kind}/v1/chat/completions"
                latency["shim", kind] = added_latency(stub_port, shim_port, path, stream, pairs)
                completed[path] = pairs + WARMUP
                for clients in CLIENTS:
                    path = f"/i/bench/{kind}-{clients}/v1/chat/completions"
                    cells["direct", kind, clients] = throughput(stub_port, DIRECT, stream, clients, seconds)
                    cells["shim", kind, clients] = throughput(shim_port, path, stream, clients, seconds)
                    completed[path] = cells["shim", kind, clients][0]
        lost = lost_rows(db, completed)
        note = bench_litellm(litellm, stub_port, workdir, seconds, pairs, latency, cells) if litellm else None
    print_tables(latency, cells, seconds)
    print(f"ledger rows lost: {lost} of {sum(completed.values())} answers received through the shim")
    print(note or "LiteLLM: not compared (pass --litellm PATH to a `litellm` installed in a separate venv)")
    print(TARGETS)
    print(f"load average at the end: {os.getloadavg()[0]:.2f} (other work on the machine skews the figures)")
    shutil.rmtree(workdir, ignore_errors=True)
    return 0 if lost == 0 else 1


def lost_rows(db: Path, completed: dict[str, int]) -> int:
    with sqlite3.connect(db) as conn:
        counts = dict(conn.execute("SELECT instance, COUNT(*) FROM calls WHERE run = 'bench' GROUP BY instance"))
    return sum(max(0, n - counts.get(path.split("/")[3], 0)) for path, n in completed.items())


def bench_litellm(
    litellm: str,
    stub_port: int,
    workdir: Path,
    seconds: float,
    pairs: int,
    latency: dict[tuple[str, str], tuple[float, float]],
    cells: dict[tuple[str, str, int], tuple[int, str]],
) -> str | None:
    """Measure LiteLLM's proxy on the same stub into `latency` and `cells`; a note if it could not run."""
    port, log = free_port(), workdir / "litellm.log"
    try:
        with process(litellm_proxy(litellm, stub_port, port, workdir), port, "/health/liveliness", log, 180):
            for kind, stream in MODES:
                latency["litellm", kind] = added_latency(stub_port, port, DIRECT, stream, min(pairs, LITELLM_PAIRS))
                for clients in CLIENTS:
                    cells["litellm", kind, clients] = throughput(port, DIRECT, stream, clients, seconds)
    except (RuntimeError, OSError) as exc:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
        return f"LiteLLM: skipped ({exc}): {' | '.join(tail)}"
    version = subprocess.run([litellm, "--version"], capture_output=True, text=True).stdout.strip()
    pairs = min(pairs, LITELLM_PAIRS)
    return f"LiteLLM proxy compared in the same run ({version or litellm}; 1 worker, no database, {pairs} pairs)"


def print_tables(
    latency: dict[tuple[str, str], tuple[float, float]],
    cells: dict[tuple[str, str, int], tuple[int, str]],
    seconds: float,
) -> None:
    proxies = [name for name in ("shim", "litellm") if any(key[0] == name for key in latency)]
    print("\nadded latency, 1 client (proxy path minus direct path, same run), ms")
    print("| mode | " + " | ".join(f"{p} p50 | {p} p99" for p in proxies) + " |")
    print("|---|" + "---|---|" * len(proxies))
    for kind, _ in MODES:
        values = " | ".join(f"{latency[p, kind][0]:+.2f} | {latency[p, kind][1]:+.2f}" for p in proxies)
        print(f"| {kind} | {values} |")
    print("\nthroughput, req/s (latency p50 / p99, ms)")
    names = ["direct", *proxies]
    print("| mode | clients | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for kind, _ in MODES:
        for clients in CLIENTS:
            row = [f"{cells[n, kind, clients][0] / seconds:,.0f} ({cells[n, kind, clients][1]})" for n in names]
            print(f"| {kind} | {clients} | " + " | ".join(row) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each throughput cell")
    parser.add_argument("--pairs", type=int, default=2000, help="direct/shim request pairs for added latency")
    parser.add_argument("--litellm", help="path to a `litellm` executable (its own venv) to compare with")
    parser.add_argument("--stub", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stub:
        serve_stub(args.stub)
        return 0
    return run(args.seconds, args.pairs, args.litellm)


if __name__ == "__main__":
    raise SystemExit(main())
