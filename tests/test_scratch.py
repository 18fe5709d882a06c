"""A run killed with SIGKILL leaves its scratch copy of the user's repository in the temp dir; the next run removes
it (snaffle/scratch.py), and never a directory whose owner still runs, an unstamped one, or a symlink."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from snaffle import scratch
from snaffle.testing import ScriptedServer
from tests.test_cli import bash, minimal_solve


def leftovers(root: Path) -> list[str]:
    return sorted(p.name.split("-")[1] for p in root.iterdir() if p.name.startswith(scratch.SWEPT_PREFIXES))


def test_the_next_run_removes_the_scratch_copy_a_killed_run_left(calc_repo: Path, tmp_path: Path) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    command = [sys.executable, "-m", "snaffle.cli"]
    with ScriptedServer([bash("echo 1"), {**bash("echo 2"), "delay": 30}]) as server:
        killed = subprocess.Popen([*command, *minimal_solve(calc_repo, "x", server.base_url, tmp_path / "a")], env=env)
        deadline = time.monotonic() + 60
        while len(server.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait()
    left = [p for p in temp.iterdir() if p.name.startswith("snaffle-scratch-")]
    assert left and (left[0] / "work" / "calc" / "__init__.py").is_file()  # the private copy of the user's code
    with ScriptedServer([{"content": "DONE"}]) as server:
        done = subprocess.run(
            [*command, *minimal_solve(calc_repo, "x", server.base_url, tmp_path / "b")], env=env, capture_output=True
        )
    assert done.returncode == 0, done.stderr
    assert leftovers(temp) == [], sorted(p.name for p in temp.iterdir())


def test_a_live_owners_unstamped_or_linked_directory_is_kept(tmp_path: Path) -> None:
    here = scratch.pid_namespace()
    live = scratch.make("snaffle-scratch-")  # this process: alive
    unstamped = tmp_path / "snaffle-scratch-unstamped"
    unstamped.mkdir()
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / scratch.OWNER_FILE).write_text(f"999999999 1 {here}", encoding="utf-8")
    (tmp_path / "snaffle-scratch-link").symlink_to(target)
    reused = tmp_path / "snaffle-index-reused"  # a live pid, but not the process that made it
    reused.mkdir()
    (reused / scratch.OWNER_FILE).write_text(f"{os.getpid()} 1 {here}", encoding="utf-8")
    gone = tmp_path / "snaffle-collect-gone"
    gone.mkdir()
    (gone / scratch.OWNER_FILE).write_text(f"999999999 12345 {here}", encoding="utf-8")
    elsewhere = tmp_path / "snaffle-collect-other-namespace"  # a container sharing the temp dir: can't tell
    elsewhere.mkdir()
    (elsewhere / scratch.OWNER_FILE).write_text("999999999 12345 pid:[1]", encoding="utf-8")
    other = tmp_path / "unrelated-dir"
    other.mkdir()
    (other / scratch.OWNER_FILE).write_text(f"999999999 12345 {here}", encoding="utf-8")
    removed = scratch.sweep(tmp_path)
    assert sorted(p.name for p in removed) == ["snaffle-collect-gone", "snaffle-index-reused"]
    assert (
        elsewhere.is_dir()
        and unstamped.is_dir()
        and target.is_dir()
        and other.is_dir()
        and (tmp_path / "snaffle-scratch-link").exists()
    )
    assert live not in scratch.sweep(live.parent) and live.is_dir()
    shutil.rmtree(live)


@pytest.mark.parametrize("text", ["", "garbage", "12 -", "-1 5 -", "1 2", "1 2 3 4", "12 - pid:[1]", "x" * 1000])
def test_an_unreadable_stamp_is_never_taken_for_a_gone_owner(text: str) -> None:
    assert not scratch.owner_gone(text)
