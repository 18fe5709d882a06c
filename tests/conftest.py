"""Shared fixtures: the calc repo with its planted bug, the scripted model server, and the trace tests' runs."""

from __future__ import annotations

import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from snaffle.testing import ScriptedServer
from tests.helpers import CALC_SOURCE, CALC_TEST, make_repo
from tests.trace_scenarios import make_runs


@pytest.fixture(autouse=True)
def temp_files_in_pytests_tree(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the code under test puts in the temp dir (a workspace's private index a test leaves open, the scratch
    copy of a `snaffle` process a test kills with SIGKILL) goes under pytest's base temp dir, which pytest prunes,
    never loose in /tmp: in this process through `tempfile.tempdir`, in the processes a test starts through TMPDIR."""
    base = str(tmp_path_factory.getbasetemp())
    monkeypatch.setattr(tempfile, "tempdir", base)
    monkeypatch.setenv("TMPDIR", base)


@pytest.fixture
def calc_repo(tmp_path: Path) -> Path:
    """A repo with a planted bug: add() subtracts."""
    files: dict[str, str | bytes] = {"calc/__init__.py": CALC_SOURCE, "tests/test_calc.py": CALC_TEST}
    return make_repo(tmp_path / "calc", files)


@pytest.fixture
def scripted() -> Iterator[Callable[..., ScriptedServer]]:
    """Start scripted model servers; all are stopped at the end of the test."""
    servers: list[ScriptedServer] = []

    def start(script: list[dict[str, object]]) -> ScriptedServer:
        server = ScriptedServer(script)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def trace_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """name -> run dir for every trace scenario, plus `torn`; made once per session under pytest's base temp dir."""
    return make_runs(tmp_path_factory.getbasetemp() / "trace-runs")


@pytest.fixture(scope="session")
def gold_file(trace_runs: dict[str, Path]) -> Path:
    """The clean run's patch is the gold patch (it fixes add)."""
    return trace_runs["clean"] / "patch.diff"


@pytest.fixture
def listener() -> Iterator[int]:
    """A real TCP listener on the host's loopback; the test fails if anything connected to it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted: list[socket.socket] = []

    def accept() -> None:
        try:
            accepted.append(server.accept()[0])
        except OSError:  # closed at the end of the test: nobody connected
            pass

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()
    assert not accepted, "a model-caused process reached the host's loopback listener"
