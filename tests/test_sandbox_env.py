"""Subprocesses of tools in both sandbox modes: group kill on timeout, output cut, the scratch environment."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from snaffle.sandbox import Sandbox, bubblewrap_works, cut

needs_bubblewrap = pytest.mark.skipif(not bubblewrap_works(), reason="bubblewrap cannot start here")
EACH_MODE = [pytest.param("bubblewrap", marks=needs_bubblewrap), "none"]


@pytest.fixture(params=EACH_MODE)
def box(tmp_path: Path, request: pytest.FixtureRequest) -> Sandbox:
    return Sandbox.create(tmp_path / "scratch", request.param)


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    box = Sandbox.create(tmp_path / "scratch", "none")
    marker = tmp_path / "child.pid"
    started = time.monotonic()
    done = box.run(f"sleep 30 & echo $! > {marker}; wait", tmp_path, 1.0, writable=tmp_path)
    assert done.timed_out and time.monotonic() - started < 10
    child = marker.read_text().strip()
    assert not running(child)


def running(pid: str, wait_s: float = 5.0) -> bool:
    """Whether the process still runs (a killed, not yet reaped zombie does not count), after up to `wait_s`."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        stat = Path(f"/proc/{pid}/stat")
        if not stat.exists() or stat.read_text().split(")")[-1].split()[0] == "Z":
            return False
        time.sleep(0.05)
    return True


def test_output_is_cut_with_a_marker() -> None:
    text = "a" * 5000 + "b" * 5000
    shown = cut(text)
    assert shown.startswith("a" * 100) and shown.endswith("b" * 100) and "2000 characters cut" in shown
    assert cut("short") == "short"


def test_binary_output_is_decoded_leniently(box: Sandbox, tmp_path: Path) -> None:
    done = box.run("printf '\\xff\\xfe ok'", tmp_path, 5, writable=tmp_path)
    assert done.returncode == 0 and "ok" in done.output


def test_sandbox_isolates_home_and_pip_target(box: Sandbox, tmp_path: Path) -> None:
    command = "echo $HOME; python -c 'import sys, pytest; print(sys.prefix)'; python -m pip --version"
    done = box.run(command, tmp_path, 30, writable=tmp_path)
    home, prefix, pip = done.output.splitlines()[:3]
    assert home == str(tmp_path / "scratch" / "home")
    assert prefix == str(tmp_path / "scratch" / "venv")
    assert pip.startswith("pip ")
