"""A kill -9 of the shim under load loses no ledger row of an answered call (the shim runs as a real process)."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from snaffle.testing import ScriptedServer

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = 8
USER = [{"role": "user", "content": "fix the bug"}]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def shim_process(upstream: str, db: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    cmd = [sys.executable, "-m", "snaffle.shim.cli", "serve", "--upstream", upstream, "--db", str(db)]
    proc = subprocess.Popen([*cmd, "--port", str(port)], cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline, "the shim did not start"
                time.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def load(port: int, name: str, stream: bool, answered: list[int], stop: threading.Event) -> None:
    """Call until stopped or the shim dies; note the call number of every answer received whole."""
    url = f"http://127.0.0.1:{port}/i/crash/{name}/v1/chat/completions"
    body = {"model": "m", "messages": USER, "stream": stream}
    with httpx.Client(timeout=5) as client:
        while not stop.is_set():
            try:
                response = client.post(url, json=body)
            except httpx.HTTPError:
                return
            whole = response.text.rstrip().endswith("data: [DONE]") if stream else response.status_code == 200
            if whole:
                answered.append(int(response.headers["x-snaffle-call"]))


@pytest.mark.timeout(60)
def test_kill_9_under_load_loses_no_answered_row(tmp_path: Path) -> None:
    db, port = tmp_path / "ledger.sqlite", free_port()
    answered: dict[str, list[int]] = {f"c{n}": [] for n in range(CLIENTS)}
    with ScriptedServer([{"content": "ok", "repeat": 100_000}]) as upstream:
        with shim_process(upstream.base_url, db, port) as proc:
            stop = threading.Event()
            threads = [
                threading.Thread(target=load, args=(port, name, n % 2 == 1, calls, stop))
                for n, (name, calls) in enumerate(answered.items())
            ]
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + 10
            while sum(map(len, answered.values())) < 300 and time.monotonic() < deadline:
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            stop.set()
            for thread in threads:
                thread.join()
        assert sum(map(len, answered.values())) >= 100
        with shim_process(upstream.base_url, db, port):  # restart on the same ledger
            conn = sqlite3.connect(db)
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            stored: dict[str, set[int]] = {}
            for name, calls in answered.items():
                stored[name] = {n for (n,) in conn.execute("SELECT call FROM calls WHERE instance = ?", (name,))}
                assert set(calls) <= stored[name], f"{name}: answered calls missing from the ledger"
                totals = httpx.get(f"http://127.0.0.1:{port}/ledger/crash/{name}").json()
                assert totals["requests"] == max(stored[name]) and totals["calls"] >= len(calls)
            conn.close()
            url = f"http://127.0.0.1:{port}/i/crash/c0/v1/chat/completions"
            after = httpx.post(url, json={"model": "m", "messages": USER})
            assert after.status_code == 200
            assert int(after.headers["x-snaffle-call"]) == max(stored["c0"]) + 1  # numbering goes on
