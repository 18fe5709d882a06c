"""Serving the shim with uvicorn: in a background thread (`start_shim`) or in the foreground (`serve`)."""

from __future__ import annotations

import gc
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from urllib.parse import quote

import httpx
import uvicorn

from snaffle.shim.app import build_app
from snaffle.shim.config import ShimConfig
from snaffle.shim.pricing import Pricing

__all__ = ["ShimConfig", "ShimHandle", "start_shim", "serve", "bind"]

START_TIMEOUT_S = 15.0


class ShimHandle:
    """A shim running in a background thread of this process."""

    def __init__(self, server: uvicorn.Server, thread: threading.Thread, url: str, token: str | None) -> None:
        self.server = server
        self.thread = thread
        self.url = url
        self.token = token

    def base_url_for(self, run: str, instance: str) -> str:
        """The OpenAI base URL one instance uses: `{url}/i/{run}/{instance}/v1`."""
        return f"{self.url}/i/{_segment(run)}/{_segment(instance)}/v1"

    def ledger_url(self, run: str, instance: str) -> str:
        return f"{self.url}/ledger/{_segment(run)}/{_segment(instance)}"

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving (in-flight calls finish first), close the upstream client and the ledger."""
        self.server.should_exit = True
        self.thread.join(timeout)

    def __enter__(self) -> ShimHandle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def bind(config: ShimConfig) -> socket.socket:
    """Check the bind address, then bind and listen (port 0 picks a free port)."""
    config.check_bind()
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    # proto must be IPPROTO_TCP: asyncio sets TCP_NODELAY on accepted sockets only then (else +40 ms per answer)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((config.host, config.port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def uvicorn_server(config: ShimConfig, pricing: Pricing | None = None) -> uvicorn.Server:
    app = build_app(config, pricing)
    settings = uvicorn.Config(
        app,
        lifespan="on",
        log_level="warning",
        access_log=False,
        timeout_keep_alive=30,
        timeout_graceful_shutdown=5,
    )
    return uvicorn.Server(settings)


def start_shim(config: ShimConfig, pricing: Pricing | None = None) -> ShimHandle:
    """Start the shim on a background thread and return once it answers."""
    sock = bind(config)
    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    try:
        server = uvicorn_server(config, pricing)
    except BaseException:
        sock.close()
        raise
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="snaffle-shim", daemon=True)
    thread.start()
    handle = ShimHandle(server, thread, url, config.token)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            handle.stop(1.0)
            sock.close()
            raise RuntimeError(f"the shim did not start on {url} (see the log above)")
        time.sleep(0.01)
    headers = {"authorization": f"Bearer {config.token}"} if config.token else {}
    httpx.get(f"{url}/healthz", headers=headers, timeout=5.0, trust_env=False).raise_for_status()
    return handle


def serve(config: ShimConfig, pricing: Pricing | None = None, announce: Callable[[str], None] | None = None) -> None:
    """Serve in the foreground until SIGINT/SIGTERM (graceful); `announce` is given the URL."""
    sock = bind(config)
    try:
        server = uvicorn_server(config, pricing)
    except BaseException:
        sock.close()
        raise
    if announce is not None:
        host, port = sock.getsockname()[:2]
        announce(f"http://{f'[{host}]' if ':' in host else host}:{port}")
    gc.freeze()  # a process of its own: keep the startup objects out of every later collection (p99 latency)
    server.run(sockets=[sock])


def _segment(name: str) -> str:
    if not name or "/" in name:
        raise ValueError(f"run and instance names must be non-empty and contain no '/': {name!r}")
    return quote(name, safe="")
