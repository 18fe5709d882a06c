"""Subprocesses of tools: group kill on timeout, output cut, the scratch environment."""

from __future__ import annotations

import time
from pathlib import Path

from snaffle.sandbox import Sandbox, cut, run_command


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    started = time.monotonic()
    done = run_command(f"sleep 30 & echo $! > {marker}; wait", tmp_path, {"PATH": "/usr/bin:/bin"}, 1.0)
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


def test_binary_output_is_decoded_leniently(tmp_path: Path) -> None:
    done = run_command("printf '\\xff\\xfe ok'", tmp_path, {"PATH": "/usr/bin:/bin"}, 5)
    assert done.returncode == 0 and "ok" in done.output


def test_sandbox_isolates_home_and_pip_target(tmp_path: Path) -> None:
    sandbox = Sandbox.create(tmp_path / "scratch")
    done = run_command(
        "echo $HOME; python -c 'import sys, pytest; print(sys.prefix)'; python -m pip --version",
        tmp_path,
        sandbox.env,
        30,
    )
    home, prefix, pip = done.output.splitlines()[:3]
    assert home == str(tmp_path / "scratch" / "home")
    assert prefix == str(tmp_path / "scratch" / "venv")
    assert pip.startswith("pip ")
