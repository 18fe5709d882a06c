"""Real loopback listeners for the endpoint tests: a web server answering HTML, a busy server, a closed port."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WEB_PAGE = b"<!DOCTYPE html><html><head><title>Welcome to nginx!</title></head><body>It works.</body></html>"


class _WebPage(BaseHTTPRequestHandler):
    """Answers every GET and POST with 200 and an HTML page, as a web server at a wrong --base-url does."""

    def _page(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(WEB_PAGE)))
        self.end_headers()
        self.wfile.write(WEB_PAGE)

    do_GET = do_POST = _page

    def log_message(self, format: str, *args: object) -> None:
        """Stay quiet."""


@contextmanager
def web_page() -> Iterator[str]:
    """A base URL whose every answer is 200 with an HTML page."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _WebPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def busy_server() -> Iterator[str]:
    """A base URL whose server accepts connections (the kernel completes the handshake) and never answers, like a
    single-slot server busy generating for another client."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def closed_port() -> str:
    """A base URL where nothing listens (the connection is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
