"""A lean HTTP/1.1 keep-alive transport for the shim's httpx client, for plain-HTTP (loopback) upstreams.

httpx's default pool rescans every pooled connection (probing each idle socket) on every request, which
costs milliseconds per call at 64 connections; this one keeps idle connections on a stack: O(1) per call.
It speaks exactly what an OpenAI-compatible upstream needs: one request per connection at a time,
Content-Length, chunked or close-delimited bodies. HTTPS upstreams keep httpx's own transport.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field

import httpx

READ_SIZE = 65536
HEADER_LIMIT = 1 << 20
STATUS_LINE = re.compile(rb"HTTP/1\.([01]) (\d{3})")


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = field(default_factory=time.monotonic)

    def usable(self, keepalive_expiry: float) -> bool:
        fresh = time.monotonic() - self.idle_since < keepalive_expiry
        return fresh and not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class LeanTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over asyncio streams with a LIFO stack of idle keep-alive connections per origin."""

    def __init__(self, max_idle: int = 512, keepalive_expiry: float = 4.0) -> None:
        self.max_idle = max_idle
        self.keepalive_expiry = keepalive_expiry
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self.closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "http":
            raise httpx.UnsupportedProtocol(f"the lean transport speaks plain http, not {request.url.scheme}")
        timeouts = request.extensions.get("timeout", {})
        body = b"".join([part async for part in request.stream])  # type: ignore[union-attr]
        head = _request_head(request)
        origin = (request.url.host, request.url.port or 80)
        while True:
            conn, reused = await self._checkout(origin, timeouts.get("connect"), request)
            try:
                conn.writer.write(head + body)
                status, headers, version = await _read_head(conn.reader, timeouts.get("read"), request)
                break
            except (ConnectionError, asyncio.IncompleteReadError) as exc:
                conn.close()
                if not reused:  # a fresh connection failed: a real error, not a stale keep-alive
                    raise httpx.RemoteProtocolError(
                        f"upstream closed the connection: {exc!r}", request=request
                    ) from exc
            except BaseException:
                conn.close()
                raise
        stream = _Body(self, origin, conn, (status, headers, version), request, timeouts.get("read"))
        return httpx.Response(status, headers=headers, stream=stream, extensions={"http_version": b"HTTP/1.1"})

    async def _checkout(
        self, origin: tuple[str, int], timeout: float | None, request: httpx.Request
    ) -> tuple[_Connection, bool]:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if conn.usable(self.keepalive_expiry):
                return conn, True
            conn.close()
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(*origin, limit=HEADER_LIMIT)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"no connection to {origin[0]}:{origin[1]} in time", request=request) from exc
        except OSError as exc:
            raise httpx.ConnectError(f"cannot connect to {origin[0]}:{origin[1]}: {exc}", request=request) from exc
        return _Connection(reader, writer), False

    def checkin(self, origin: tuple[str, int], conn: _Connection) -> None:
        idle = self._idle.setdefault(origin, [])
        if len(idle) >= self.max_idle or self.closed:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        idle.append(conn)

    async def aclose(self) -> None:
        self.closed = True
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


class _Body(httpx.AsyncByteStream):
    """The response body; the connection goes back to the pool once the body was read whole."""

    def __init__(
        self,
        transport: LeanTransport,
        origin: tuple[str, int],
        conn: _Connection,
        head: tuple[int, list[tuple[bytes, bytes]], int],
        request: httpx.Request,
        timeout: float | None,
    ) -> None:
        self.transport, self.origin, self.conn = transport, origin, conn
        self.request, self.timeout = request, timeout
        status, headers, version = head
        names = {name.lower(): value.lower() for name, value in headers}
        self.chunked = b"chunked" in names.get(b"transfer-encoding", b"")
        length = names.get(b"content-length")
        no_body = request.method == "HEAD" or status in (204, 304)
        self.length = 0 if no_body else (int(length) if length is not None and not self.chunked else None)
        self.reusable = version == 1 and b"close" not in names.get(b"connection", b"")
        self.complete = False
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for part in self._parts():
                yield part
        except TimeoutError as exc:
            raise httpx.ReadTimeout("upstream read timed out", request=self.request) from exc
        except (ConnectionError, asyncio.IncompleteReadError, ValueError) as exc:
            message = "peer closed connection without sending complete message body"
            raise httpx.RemoteProtocolError(f"{message}: {exc!r}", request=self.request) from exc
        self.complete = True

    async def _parts(self) -> AsyncIterator[bytes]:
        reader, within = self.conn.reader, self._within
        if self.chunked:
            dechunker = Dechunker()
            while not dechunker.done:
                data = await within(reader.read(READ_SIZE))
                if not data:
                    raise asyncio.IncompleteReadError(b"", None)
                if body := dechunker.feed(data):
                    yield body  # everything that arrived together goes on together: one write downstream
        elif self.length is not None:
            left = self.length
            while left:
                data = await within(reader.read(min(left, READ_SIZE)))
                if not data:
                    raise asyncio.IncompleteReadError(b"", left)
                left -= len(data)
                yield data
        else:
            self.reusable = False
            while data := await within(reader.read(READ_SIZE)):
                yield data

    async def _within(self, read: Awaitable[bytes]) -> bytes:
        """The read timeout bounds each read (never a span that includes a `yield`)."""
        async with asyncio.timeout(self.timeout):
            return await read

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.complete and self.reusable:
            self.transport.checkin(self.origin, self.conn)
        else:
            self.conn.close()


class Dechunker:
    """Incremental decoder of a chunked transfer-encoded body; raises ValueError on a malformed one."""

    def __init__(self) -> None:
        self.pending = b""
        self.state = "size"  # size -> data -> crlf -> size ... -> trailer -> done
        self.left = 0

    @property
    def done(self) -> bool:
        return self.state == "done"

    def feed(self, data: bytes) -> bytes:
        """Decode `data`; return the body bytes it completes (possibly none)."""
        buffer, position, out = self.pending + data, 0, []
        while self.state != "done":
            if self.state == "data":
                piece = buffer[position : position + self.left]
                out.append(piece)
                self.left -= len(piece)
                position += len(piece)
                if self.left:
                    break
                self.state = "crlf"
            elif self.state == "crlf":
                if len(buffer) - position < 2:
                    break
                if buffer[position : position + 2] != b"\r\n":
                    raise ValueError("chunk data not followed by CRLF")
                position += 2
                self.state = "size"
            else:
                end = buffer.find(b"\r\n", position)
                if end < 0:
                    break
                line, position = buffer[position:end], end + 2
                if self.state == "size":
                    self.left = int(line.split(b";", 1)[0], 16)
                    self.state = "data" if self.left else "trailer"
                elif not line:
                    self.state = "done"
        self.pending = buffer[position:]
        return b"".join(out)


def _request_head(request: httpx.Request) -> bytes:
    lines = [b"%s %s HTTP/1.1" % (request.method.encode(), request.url.raw_path)]
    lines += [b"%s: %s" % (name, value) for name, value in request.headers.raw]
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def _read_head(
    reader: asyncio.StreamReader, timeout: float | None, request: httpx.Request
) -> tuple[int, list[tuple[bytes, bytes]], int]:
    try:
        async with asyncio.timeout(timeout):
            raw = await reader.readuntil(b"\r\n\r\n")
            while raw.startswith(b"HTTP/1.1 1"):  # 1xx interim answers precede the real one
                raw = await reader.readuntil(b"\r\n\r\n")
    except TimeoutError as exc:
        raise httpx.ReadTimeout("upstream did not answer in time", request=request) from exc
    except asyncio.LimitOverrunError as exc:
        raise httpx.RemoteProtocolError("upstream response headers too large", request=request) from exc
    lines = raw[:-4].split(b"\r\n")
    match = STATUS_LINE.match(lines[0])
    if match is None:
        raise httpx.RemoteProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}", request=request)
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers.append((name.strip(), value.strip()))
    return int(match.group(2)), headers, int(match.group(1))
